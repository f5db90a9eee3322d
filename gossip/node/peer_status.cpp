#include "gossip/node/peer_status.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "gossip/node/frame.h"
#include "gossip/node/member_wire.h"
#include "gossip/node/peer_address.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus::gossip {
namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<PeerStatusReport> QueryPeerStatus(const std::string& address, const std::shared_ptr<const TlsContext>& tls,
                                         double timeout_ms) {
  PLEXUS_ASSIGN_OR_RETURN(sockaddr_storage ss, ResolvePeerAddress(address));
  Socket s(::socket(ss.ss_family, SOCK_STREAM, 0));
  if (s.fd() < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  const socklen_t len = ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    return UnavailableError("cannot reach a peer at " + address + ": " + std::strerror(errno));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_ms));
  std::unique_ptr<TlsChannel> channel = tls ? std::make_unique<TlsChannel>(*tls, true) : nullptr;
  auto send_all = [&](const std::string& bytes) -> Status {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::send(s.fd(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return UnavailableError("the peer at " + address + " closed the link");
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  };
  v1::GossipEnvelope request;
  request.mutable_status_request();
  const std::string frame = EncodeFrame(FrameType::kMessage, 0, 0, request.SerializeAsString());
  std::string out;
  if (channel) {
    PLEXUS_RETURN_IF_ERROR(channel->Start(&out));
    PLEXUS_RETURN_IF_ERROR(channel->Write(frame, &out));  // held until the handshake completes
  } else {
    out = frame;
  }
  PLEXUS_RETURN_IF_ERROR(send_all(out));

  FrameReader reader(16 << 20);
  std::vector<Frame> frames;
  char buf[16384];
  v1::GossipEnvelope e;
  // The peer's hello comes first on every link; its status follows.
  auto has_status = [&] {
    for (const Frame& f : frames) {
      if (f.type != FrameType::kMessage || !e.ParseFromString(f.payload)) return false;
      if (e.has_status()) return true;
    }
    frames.clear();
    return false;
  };
  while (!has_status()) {
    if (!frames.empty()) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{s.fd(), POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
      return UnavailableError("no answer from the peer at " + address + " in time");
    }
    const ssize_t n = ::recv(s.fd(), buf, sizeof buf, 0);
    if (n <= 0) {
      return UnavailableError(
          "the peer at " + address + " closed the link without an answer" +
          (channel ? " (is the CA the federation's, and TLS on at both ends?)" : " (does it use TLS?)"));
    }
    std::string plain;
    std::string_view data(buf, static_cast<size_t>(n));
    if (channel) {
      std::string reply;
      PLEXUS_RETURN_IF_ERROR(channel->Feed(data, &plain, &reply));
      if (!reply.empty()) PLEXUS_RETURN_IF_ERROR(send_all(reply));
      data = plain;
    }
    PLEXUS_RETURN_IF_ERROR(reader.Append(data, &frames));
  }
  if (!e.has_status()) {
    return InvalidArgumentError("the peer at " + address + " answered with something other than its status");
  }
  const v1::GossipStatus& st = e.status();
  PeerStatusReport r;
  r.node = st.node();
  r.nodes = st.nodes();
  r.run = st.run();
  r.rounds_completed = st.rounds_completed();
  r.rounds = st.rounds();
  if (st.has_accuracy()) r.accuracy = st.accuracy();
  r.accuracy_round = st.accuracy_round();
  for (const v1::GossipMember& m : st.members()) {
    r.members.push_back(FromProto(m));
  }
  r.bytes_sent = st.bytes_sent();
  r.bytes_received = st.bytes_received();
  r.frames_refused = st.frames_refused();
  return r;
}

}  // namespace plexus::gossip
