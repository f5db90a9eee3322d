// libFuzzer target: the IDX reader of Fashion-MNIST files (images and labels). The first two
// bytes (little-endian) give the length of the images file; the rest is the labels file.
#include <algorithm>
#include <cstdint>
#include <string>

#include "compute/fashion_mnist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t images_len = std::min<size_t>(data[0] | (size_t{data[1]} << 8), size - 2);
  const std::string images(reinterpret_cast<const char*>(data + 2), images_len);
  const std::string labels(reinterpret_cast<const char*>(data + 2 + images_len), size - 2 - images_len);
  (void)plexus::ParseIdx(images, labels);
  return 0;
}
