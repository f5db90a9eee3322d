#include "core/payload.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/safetensors.h"

namespace plexus {
namespace {

ModelState Delta() {
  ModelState m = *ModelState::Create({{"a.weight", {3, 4}}, {"b", {5}}, {"c", {300000}}});
  for (size_t i = 0; i < m.num_params(); ++i) m.data()[i] = static_cast<float>(i % 11) * 0.125f - 0.5f;
  return m;
}

TEST(PayloadTest, AModelIsItsSafetensorsBytesWithTheValuesWhereTheModelKeepsThem) {
  ModelState delta = Delta();
  const std::string encoded = EncodeSafetensors(delta);
  const std::string prefix = SafetensorsPrefix(delta);
  const char* values = reinterpret_cast<const char*>(delta.data().data());
  const std::shared_ptr<const Payload> p = Payload::SafetensorsOf(std::move(delta));
  EXPECT_EQ(p->head(), prefix);
  EXPECT_EQ(p->body().data(), values);  // not copied
  EXPECT_EQ(p->size(), encoded.size());
  EXPECT_EQ(p->ToString(), encoded);
  EXPECT_EQ(p->Sha256Hex(), Sha256Hex(encoded));
}

TEST(PayloadTest, ASharedModelIsServedFromItsOwnValuesAndKeptAliveByThePayload) {
  auto model = std::make_shared<const ModelState>(Delta());
  const std::string encoded = EncodeSafetensors(*model);
  const char* values = reinterpret_cast<const char*>(model->data().data());
  std::shared_ptr<const Payload> p = Payload::SafetensorsOf(model);
  EXPECT_EQ(p->body().data(), values);  // not copied
  EXPECT_EQ(p->Sha256Hex(), Sha256Hex(encoded));
  model.reset();  // the payload is now the model's only owner
  EXPECT_EQ(p->ToString(), encoded);
}

TEST(PayloadTest, BytesAreTheirOwnPayload) {
  const std::string bytes = "coded update bytes";
  const std::shared_ptr<const Payload> p = Payload::Of(bytes);
  EXPECT_EQ(p->size(), bytes.size());
  EXPECT_EQ(p->ToString(), bytes);
  EXPECT_EQ(p->Sha256Hex(), Sha256Hex(bytes));

  const auto shared = std::make_shared<const std::string>(std::string(5000, 'x'));
  const std::shared_ptr<const Payload> q = Payload::Of(shared);
  EXPECT_EQ(q->head().size() + q->body().size(), shared->size());
  EXPECT_EQ(q->body().data(), shared->data());  // shared, not copied
  EXPECT_EQ(q->ToString(), *shared);
  EXPECT_EQ(Payload::Of(std::string())->size(), 0u);
}

}  // namespace
}  // namespace plexus
