// Laws the accountant must keep on any parameters (rapidcheck): more releases never cost less,
// more noise never costs more, and the improved conversion is never worse than the classic one.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "privacy/rdp_accountant.h"

namespace plexus {
namespace {

struct Setting {
  double q;
  double z;
  int64_t releases;
  double delta;
};

Setting RandomSetting() {
  Setting s;
  s.q = *rc::gen::inRange(1, 1001) / 1000.0;  // 0.001 .. 1
  s.z = *rc::gen::inRange(30, 1000) / 100.0;  // 0.3 .. 10
  s.releases = *rc::gen::inRange<int64_t>(1, 5000);
  s.delta = std::pow(10.0, -*rc::gen::inRange(3, 10));
  return s;
}

double Epsilon(const Setting& s, EpsilonConversion conversion = EpsilonConversion::kImproved) {
  PrivacyAccountant accountant;
  RC_ASSERT(accountant.AddSampledGaussian(s.q, s.z, s.releases).ok());
  Result<PrivacySpent> spent = accountant.Spent(s.delta, conversion);
  RC_ASSERT(spent.ok());
  RC_ASSERT(spent->epsilon >= 0);
  return spent->epsilon;
}

RC_GTEST_PROP(RdpAccountantLaws, EpsilonGrowsWithReleases, ()) {
  const Setting s = RandomSetting();
  Setting more = s;
  more.releases += *rc::gen::inRange<int64_t>(1, 5000);
  RC_ASSERT(Epsilon(more) >= Epsilon(s));
}

RC_GTEST_PROP(RdpAccountantLaws, EpsilonFallsWithNoise, ()) {
  const Setting s = RandomSetting();
  Setting noisier = s;
  noisier.z *= 1 + *rc::gen::inRange(1, 300) / 100.0;
  RC_ASSERT(Epsilon(noisier) <= Epsilon(s));
}

RC_GTEST_PROP(RdpAccountantLaws, EpsilonGrowsWithTheSamplingRate, ()) {
  const Setting s = RandomSetting();
  Setting denser = s;
  denser.q = std::min(1.0, s.q * (1 + *rc::gen::inRange(1, 300) / 100.0));
  RC_ASSERT(Epsilon(denser) >= Epsilon(s) * (1 - 1e-9));
}

RC_GTEST_PROP(RdpAccountantLaws, ImprovedConversionIsNeverWorse, ()) {
  const Setting s = RandomSetting();
  RC_ASSERT(Epsilon(s, EpsilonConversion::kImproved) <= Epsilon(s, EpsilonConversion::kClassic) + 1e-12);
}

}  // namespace
}  // namespace plexus
