#include "server/rpc/prometheus_text.h"

#include <gtest/gtest.h>

#include "tests/testing/prometheus_samples.h"

namespace plexus {
namespace {

using ::plexus::testing::PrometheusSample;

TEST(PrometheusTextTest, CountersGaugesLabelsAndTheHistogramInTheTextFormat) {
  ServerMetrics m;
  m.engine.model_version = 7;
  m.engine.updates_accepted = 40;
  m.engine.updates_refused = 3;
  m.engine.connected_clients = 5;
  m.engine.last_accuracy = 0.875;
  m.refusals = {{"INVALID_ARGUMENT", 2}, {"NOT_FOUND", 1}};
  m.upload_bytes = 1000;
  m.download_bytes = 2000;
  m.received_upload_bytes = 1500;
  m.upload_seconds_le = {0, 1, 2, 3, 3, 3, 3, 3, 3};
  m.upload_count = 4;
  m.upload_seconds_sum = 70.5;
  const std::string text = PrometheusText(m, 12345);
  EXPECT_EQ(PrometheusSample(text, "plexus_model_version"), 7);
  EXPECT_EQ(PrometheusSample(text, "plexus_updates_accepted_total"), 40);
  EXPECT_EQ(PrometheusSample(text, "plexus_updates_refused_total"), 3);
  EXPECT_EQ(PrometheusSample(text, "plexus_connected_clients"), 5);
  EXPECT_EQ(PrometheusSample(text, "plexus_last_test_accuracy"), 0.875);
  EXPECT_EQ(PrometheusSample(text, "plexus_refused_calls_total{code=\"INVALID_ARGUMENT\"}"), 2);
  EXPECT_EQ(PrometheusSample(text, "plexus_refused_calls_total{code=\"NOT_FOUND\"}"), 1);
  EXPECT_EQ(PrometheusSample(text, "plexus_upload_bytes_total"), 1000);
  EXPECT_EQ(PrometheusSample(text, "plexus_download_bytes_total"), 2000);
  EXPECT_EQ(PrometheusSample(text, "plexus_upload_received_bytes_total"), 1500);
  EXPECT_EQ(PrometheusSample(text, "plexus_upload_seconds_bucket{le=\"0.05\"}"), 1);
  EXPECT_EQ(PrometheusSample(text, "plexus_upload_seconds_bucket{le=\"+Inf\"}"), 4);
  EXPECT_EQ(PrometheusSample(text, "plexus_upload_seconds_count"), 4);
  EXPECT_EQ(PrometheusSample(text, "plexus_resident_memory_bytes"), 12345);
  EXPECT_NE(text.find("# TYPE plexus_updates_accepted_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE plexus_upload_seconds histogram"), std::string::npos);
  EXPECT_GT(ResidentBytes(), 0);
}

}  // namespace
}  // namespace plexus
