// Http2Refusal: what a plexus peer says to a gRPC client (plexus client, plexus status --server)
// that reached its port by mistake. gRPC needs an HTTP/2 answer to show anything but "Failed
// parsing HTTP/2" and retry: so the peer speaks just enough HTTP/2 to end each call the client
// starts with FAILED_PRECONDITION and a message naming what it reached and what to use instead.
// The client takes that code as final and says so at once, instead of waiting out --give-up-s.
//
// Fed the link's bytes from its first one (the client preface); answers with a server preface
// (SETTINGS), acknowledges the client's SETTINGS, and ends every stream the client opens with a
// trailers-only HEADERS frame (:status 200, grpc-status 9, grpc-message), headers coded as HPACK
// literals without indexing or Huffman. Bodies are skipped as they arrive, never buffered.
// Plain C++, no I/O; thread-compatible.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace plexus::gossip {

// The 24 bytes every HTTP/2 client sends first.
inline constexpr std::string_view kHttp2ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

class Http2Refusal {
 public:
  // `message`: the grpc-message every call gets (any bytes; percent-encoded on the wire).
  explicit Http2Refusal(std::string message) : message_(std::move(message)) {}

  // Takes the next bytes from the client and returns what to send back (possibly nothing).
  // After a malformed preface or frame it answers nothing more (the caller closes the link).
  std::string Feed(std::string_view bytes);
  // Streams answered so far.
  size_t answered() const { return answered_.size(); }
  bool failed() const { return failed_; }

 private:
  std::string Answer(uint32_t stream) const;

  const std::string message_;
  std::string header_;  // the preface or a frame header, gathered across reads
  bool preface_done_ = false;
  bool settings_sent_ = false;
  uint64_t skip_ = 0;  // payload bytes of the current frame still to pass over
  bool failed_ = false;
  std::set<uint32_t> answered_;
};

}  // namespace plexus::gossip
