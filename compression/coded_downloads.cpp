#include "compression/coded_downloads.h"

#include <algorithm>

namespace plexus {

Result<std::unique_ptr<CodedDownloads>> CodedDownloads::Create(std::string_view spec, size_t kept_models,
                                                               size_t kept_encodings) {
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, MakeCodec(spec));
  if (!codec->keeps_every_value()) {
    return InvalidArgumentError("download codec '" + std::string(spec) +
                                "': downloads take f32, fp16, bf16 or int8 (a whole model may travel in it, and " +
                                CodecNameOf(spec) + " drops or randomizes values)");
  }
  return std::unique_ptr<CodedDownloads>(
      new CodedDownloads(std::string(spec), std::move(codec), std::max<size_t>(kept_models, 1), kept_encodings));
}

std::optional<CodedDownloads::Download> CodedDownloads::Kept(uint64_t version, const std::string& base_sha256) const {
  for (const auto& [key, download] : encodings_) {
    if (key.first == version && key.second == base_sha256) return download;
  }
  return std::nullopt;
}

bool CodedDownloads::Holds(const std::string& sha256) const {
  return std::find(rebuilt_sha256_.begin(), rebuilt_sha256_.end(), sha256) != rebuilt_sha256_.end();
}

void CodedDownloads::AddHeld(std::shared_ptr<const ModelState> model, const std::string& sha256) {
  rebuilt_.push_back(std::move(model));
  rebuilt_sha256_.push_back(sha256);
  if (rebuilt_.size() > kept_models_) {
    rebuilt_.pop_front();
    rebuilt_sha256_.pop_front();
  }
}

Result<CodedDownloads::Download> CodedDownloads::For(const ModelState& model, const std::string& base_sha256) {
  if (std::optional<Download> kept = Kept(model.version(), base_sha256)) return *kept;
  std::shared_ptr<const ModelState> base;
  for (size_t i = 0; i < rebuilt_.size(); ++i) {
    if (!base_sha256.empty() && rebuilt_sha256_[i] == base_sha256 && rebuilt_[i]->CheckSameLayout(model).ok()) {
      base = rebuilt_[i];
    }
  }
  ModelState change = model;
  if (base) change.Subtract(*base);
  // Stochastic codecs are refused at Create; the seed is there for the interface.
  auto bytes = std::make_shared<const std::string>(codec_->Encode(change, nullptr, model.version()));
  PLEXUS_ASSIGN_OR_RETURN(ModelState rebuilt, codec_->Decode(*bytes, change));
  if (base) rebuilt.Add(*base);
  rebuilt.set_version(model.version());
  Download d{bytes, base ? base_sha256 : std::string(), rebuilt.ContentSha256(),
             std::make_shared<const ModelState>(std::move(rebuilt))};
  AddHeld(d.rebuilt, d.model_sha256);
  if (kept_encodings_ > 0) {
    encodings_.emplace_back(std::make_pair(model.version(), base_sha256), d);
    if (encodings_.size() > kept_encodings_) encodings_.pop_front();
  }
  return d;
}

}  // namespace plexus
