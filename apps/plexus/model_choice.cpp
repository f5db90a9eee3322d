#include "apps/plexus/model_choice.h"

#include "apps/plexus/commands.h"
#include "compute/model_zoo.h"
#include "compute/portable_trainer.h"
#include "compute/script_model.h"
#include "compute/text_corpus.h"

namespace plexus::cli {
namespace {

bool LooksLikeFile(const std::string& flag) { return flag.find('/') != std::string::npos || IsScriptModelPath(flag); }

}  // namespace

ModelChoice::ModelChoice(const std::string& flag, const std::string& loss)
    : flag_(flag), mse_(loss == "mse"), next_byte_(loss == "next_byte") {
  if (loss != "mse" && loss != "cross_entropy" && loss != "next_byte") {
    throw CommandError("--loss '" + loss + "': cross_entropy, mse or next_byte");
  }
  if (mse_ && !LooksLikeFile(flag)) {
    throw CommandError("--loss mse trains a regression: it needs a TorchScript model (--model PATH.pt), not " + flag);
  }
  if (next_byte_ && !LooksLikeFile(flag)) {
    throw CommandError("--loss next_byte is for a TorchScript language model (--model PATH.pt), not " + flag +
                       (IsLanguageModel(flag) ? " (which predicts the next byte without it)" : ""));
  }
  if (!LooksLikeFile(flag)) {
    const std::vector<std::string> names = ModelNames();
    if (std::find(names.begin(), names.end(), flag) == names.end()) {
      throw CommandError("--model '" + flag +
                         "': not a built-in model (cnn, mlp, tinylm) nor a TorchScript file (PATH.pt)");
    }
    federation_name_ = flag;
    return;
  }
#if PLEXUS_WITH_TORCH
  ScriptModelInfo info = Take(ReadScriptModel(flag), "--model");
  script_path_ = flag;
  federation_name_ = info.name + (mse_ ? "+mse" : next_byte_ ? "+next_byte" : "");
  script_initial_ = std::move(info.initial);
  script_buffers_ = std::move(info.buffers);
#else
  throw CommandError("--model " + flag + ": TorchScript models need LibTorch, which this build leaves out");
#endif
}

bool ModelChoice::language() const { return next_byte_ || (!is_script() && IsLanguageModel(flag_)); }

ModelState ModelChoice::Initial(uint64_t seed) const {
  if (is_script()) return script_initial_;
  return Take(InitModel(flag_, seed), "--model");
}

Result<std::unique_ptr<Trainer>> ModelChoice::MakeTrainer(int threads, bool portable, bool local_buffers) const {
#if PLEXUS_WITH_TORCH
  if (is_script()) {
    ScriptTrainerOptions o;
    o.threads = threads;
    o.local_buffers = local_buffers;
    o.mse = mse_;
    o.next_byte = next_byte_;
    return MakeScriptTrainer(script_path_, o);
  }
  if (!portable) return MakeTorchTrainer(flag_, threads);
#else
  (void)threads;
  (void)portable;
  (void)local_buffers;
#endif
  return MakePortableTrainer(flag_);
}

Status CheckServerModel(const ModelChoice* mine, const std::string& announced) {
  if (mine && announced == mine->federation_name()) return Status::Ok();
  if (!mine && IsLanguageModel(announced)) {
    return FailedPreconditionError("the server federates " + announced +
                                   ", a language model: start this client with --model " + announced +
                                   " (it reads a text corpus, by default " + kDefaultTextCorpusDir + ")");
  }
  if (IsScriptModelName(announced) && !(mine && mine->is_script())) {
    return FailedPreconditionError("the server federates a TorchScript model (" + announced +
                                   "): start this client with --model and the server's model file (PATH.pt)");
  }
  // The same file trained with another --loss: the name's suffix says which.
  const auto without_loss = [](std::string name) {
    for (const std::string suffix : {"+mse", "+next_byte"}) {
      if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
    }
    return name;
  };
  if (mine && mine->is_script() && without_loss(announced) == without_loss(mine->federation_name())) {
    if (announced.ends_with("+mse")) {
      return FailedPreconditionError("the server trains a regression: start this client with --loss mse");
    }
    if (announced.ends_with("+next_byte")) {
      return FailedPreconditionError("the server trains a language model: start this client with --loss next_byte");
    }
    return FailedPreconditionError(std::string("the server trains a classifier: start this client without --loss ") +
                                   (mine->regression() ? "mse" : "next_byte"));
  }
  if (mine && mine->is_script()) {
    return FailedPreconditionError("--model " + mine->script_path() + " has another parameter layout (" +
                                   mine->federation_name() + ") than the server's model (" + announced +
                                   "): start this client with the server's model file");
  }
  if (mine) {
    return FailedPreconditionError("--model " + mine->federation_name() + ", but the server federates " + announced +
                                   " (leave --model out to train the server's built-in model)");
  }
  return Status::Ok();  // no --model: the client trains the built-in model the server names
}

void AddLossFlag(CLI::App* cmd, std::string* loss) {
  cmd->add_option("--loss", *loss,
                  "cross_entropy (classification: the model returns logits), next_byte (a TorchScript language model: "
                  "int64 bytes in, [batch, t, 256] logits of each next byte out, on a text corpus) or mse (regression "
                  "with a TorchScript "
                  "model: it returns predictions, the data's label column or y holds real-valued targets, and the "
                  "reported accuracy is R^2)")
      ->check(CLI::IsMember({"cross_entropy", "mse", "next_byte"}))
      ->capture_default_str();
}

DataFileOptions DataFlags::Options(Split split, bool regression) const {
  DataFileOptions o;
  o.label_column = label_column;
  o.x_name = x_name;
  o.y_name = y_name;
  if (!input_shape.empty()) o.input_shape = Take(ParseInputShape(input_shape), "--input-shape");
  o.split = split;
  o.regression = regression;
  return o;
}

void AddDataFlags(CLI::App* cmd, DataFlags* f, const std::string& what) {
  cmd->add_option("--data", f->data,
                  what +
                      ": a CSV file (a header, numeric features, a label column), a .safetensors file with "
                      "tensors x and y, a folder of .safetensors files, or a folder of plain-text files (a text "
                      "corpus, for --model tinylm; its default: " +
                      std::string(kDefaultTextCorpusDir) + ") (default: Fashion-MNIST from --data-dir)");
  cmd->add_option("--label-column", f->label_column, "CSV: the label column's name")->capture_default_str();
  cmd->add_option("--input-shape", f->input_shape,
                  "The shape of one example as the model takes it, e.g. 1,28,28 (default: as the file stores it)");
  cmd->add_option("--x-name", f->x_name, "safetensors: the features tensor's name")->capture_default_str();
  cmd->add_option("--y-name", f->y_name, "safetensors: the labels tensor's name")->capture_default_str();
}

void DefaultDataForModel(const std::string& model_flag, const std::string& loss, DataFlags* f) {
  if (!f->given() && (IsLanguageModel(model_flag) || loss == "next_byte")) f->data = kDefaultTextCorpusDir;
}

TrainAndTest LoadTrainAndTest(const DataFlags& f, bool regression, const std::string& data_dir, double test_split,
                              uint64_t seed) {
  TrainAndTest out;
  if (f.given() && IsTextCorpus(f.data)) {
    out.train = LoadData(f, regression, data_dir, Split::kTrain);
    out.test = LoadData(f, regression, data_dir, Split::kTest);
  } else if (f.given()) {  // a user's data file: a seeded share of it is the test set
    HeldOut split = Take(HoldOut(LoadData(f, regression, data_dir, Split::kTrain), test_split, seed), "--data");
    out.train = std::move(split.kept);
    out.test = std::move(split.held_out);
  } else {
    out.train = Take(LoadFashionMnist(data_dir, Split::kTrain));
    out.test = Take(LoadFashionMnist(data_dir, Split::kTest));
  }
  return out;
}

Dataset LoadData(const DataFlags& f, bool regression, const std::string& data_dir, Split split,
                 const ExampleSelector& select) {
  if (f.given()) return Take(LoadDataFile(f.data, f.Options(split, regression), select), "--data");
  if (regression) throw CommandError("--loss mse needs a data file of real-valued targets (--data)");
  return Take(LoadFashionMnist(data_dir, split, select));
}

}  // namespace plexus::cli
