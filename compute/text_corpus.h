// A text corpus as a data set for a byte-level language model (`--model tinylm`): every plain-text
// file of a folder (by default Debian's `fortunes` package), cut into windows of context + 1
// bytes. A window is one example: the model reads its first `context` bytes and predicts each next
// byte (the window's last `context` bytes), so every byte of a file is a target once.
//
// Which windows are validation is fixed by position, not drawn: window k of a file is in the
// validation split when k % 10 == 9, in the training split otherwise, the same on every machine and
// in every process. An example's label is the index of its source file in name order (the corpus
// has at most 256 files): the partitions that split by label (`dirichlet:A`, `shards:S`) then split
// by source file, the corpus's natural non-IID partition. Stateless functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "compute/dataset.h"
#include "compute/fashion_mnist.h"
#include "core/status.h"

namespace plexus {

inline constexpr const char* kDefaultTextCorpusDir = "/usr/share/games/fortunes";
// tinylm's context: the bytes it reads to predict the next one.
inline constexpr int64_t kTextContext = 64;

// The files a folder's corpus is made of, in name order: regular files (symlinks, such as
// fortunes' `*.u8`, and `*.dat` indexes left out) that hold no NUL byte. NotFound when the folder
// does not exist; InvalidArgument when it has no text file, more than 256, or a file with a NUL
// byte (binary, not text).
Result<std::vector<std::string>> TextCorpusFiles(const std::string& dir);

// True when `dir` is a folder whose candidate files (as above) are all text: what `--data DIR`
// reads as a text corpus.
bool IsTextCorpus(const std::string& dir);

// The `split` (kTest is the validation split) of the corpus in `dir` as windows of context + 1
// bytes (example_shape {context + 1}, one byte each, read as the float of its value), keeping only
// the examples `select` names. Errors as TextCorpusFiles, and InvalidArgument when the split holds
// no window.
Result<Dataset> LoadTextCorpus(const std::string& dir, Split split, const ExampleSelector& select = {},
                               int64_t context = kTextContext);

// The entropy of the predicted bytes' unigram distribution in `d` (every window's last `context`
// bytes), in bits per character (byte): the best a model that knows only byte frequencies could
// reach on `d`, even one fitted to `d` itself. The baseline a language model must beat on its test
// set. 0 for an empty data set.
double UnigramBitsPerChar(const Dataset& d);

// Bits per character (byte) from a mean cross-entropy in nats per predicted byte.
inline double BitsPerChar(double loss_nats) { return loss_nats / 0.6931471805599453; }

}  // namespace plexus
