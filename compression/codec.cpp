#include "compression/codec.h"

#include <iterator>

#include "aggregators/strategy_spec.h"

namespace plexus {

// The codecs, one file each (compression/<name>_codec.cpp); a new one is its file and one line in
// each list below. A factory reads its parameters from the spec (leaving the check that none is
// left over to MakeCodec) and returns InvalidArgument for a bad one.
Result<std::unique_ptr<Codec>> MakeF32Codec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeFp16Codec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeBf16Codec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeInt8Codec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeTopKCodec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeTernGradCodec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeQsgdCodec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeExactSumCodec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeBundleCodec(StrategySpec& spec, ThreadPool* pool);
Result<std::unique_ptr<Codec>> MakeDctCodec(StrategySpec& spec, ThreadPool* pool);

namespace {

struct CodecEntry {
  const char* name;
  const char* usage;  // with its parameters, for the error that lists the codecs
  Result<std::unique_ptr<Codec>> (*make)(StrategySpec& spec, ThreadPool* pool);
};
constexpr CodecEntry kCodecs[] = {
    {"f32", "f32", MakeF32Codec},
    {"fp16", "fp16", MakeFp16Codec},
    {"bf16", "bf16", MakeBf16Codec},
    {"int8", "int8[:chunk=C]", MakeInt8Codec},
    {"topk", "topk[:ratio=R]", MakeTopKCodec},
    {"terngrad", "terngrad", MakeTernGradCodec},
    {"qsgd", "qsgd[:levels=L]", MakeQsgdCodec},
    {kPartialSumCodec, kPartialSumCodec, MakeExactSumCodec},
    {kUpdateBundleCodec, kUpdateBundleCodec, MakeBundleCodec},
    {"dct", "dct[:chunk=C,k=K,decay=B]", MakeDctCodec},
};

}  // namespace

Result<std::shared_ptr<const CodedDelta>> Codec::Read(std::string, const ModelState&) const {
  return FailedPreconditionError("codec " + Describe() + " has no coded form: decode its bytes");
}

CodedDeltaReader MakeCodedDeltaReader(ModelState layout) {
  return [layout = std::move(layout)](const std::string& spec,
                                      std::string bytes) -> Result<std::shared_ptr<const CodedDelta>> {
    PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, MakeCodec(spec));
    return codec->Read(std::move(bytes), layout);
  };
}

std::vector<std::string> CodecNames() {
  std::vector<std::string> names;
  for (const CodecEntry& c : kCodecs) names.emplace_back(c.name);
  return names;
}

std::string CodecNameOf(std::string_view spec) { return std::string(spec.substr(0, spec.find(':'))); }

Result<std::unique_ptr<Codec>> MakeCodec(std::string_view text, ThreadPool* pool) {
  auto parsed = StrategySpec::Parse(text);
  if (!parsed.ok()) return InvalidArgumentError("--codec: " + parsed.status().message());
  StrategySpec spec = std::move(parsed).value();
  const auto entry =
      std::find_if(std::begin(kCodecs), std::end(kCodecs), [&](const CodecEntry& c) { return spec.name() == c.name; });
  if (entry == std::end(kCodecs)) {
    std::string known;
    for (const CodecEntry& c : kCodecs) known += (known.empty() ? "" : ", ") + std::string(c.usage);
    return InvalidArgumentError("--codec: unknown codec '" + spec.name() + "' (known: " + known + ")");
  }
  Result<std::unique_ptr<Codec>> codec = entry->make(spec, pool);
  if (!codec.ok()) return InvalidArgumentError("--codec: " + codec.status().message());
  if (Status s = spec.CheckAllUsed(); !s.ok()) return InvalidArgumentError("--codec: " + s.message());
  (*codec)->spec_ = std::string(text);
  return codec;
}

}  // namespace plexus
