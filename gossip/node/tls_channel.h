// TLS 1.3 with mutual certificates on a peer link, as a state machine over OpenSSL memory BIOs:
// the driver feeds the ciphertext it read from the socket and sends the ciphertext this produces;
// no sockets here. Both ends present a certificate signed by the federation's CA (`plexus certs
// issue --peer NAME`); a certificate from another CA, or none, fails the handshake.
// TlsContext is immutable once made and shared by every channel of a node; a TlsChannel belongs
// to one connection (one thread).
#pragma once

#include <openssl/ssl.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus::gossip {

class TlsContext {
 public:
  // InvalidArgument when a PEM does not parse or the key does not match the certificate.
  static Result<std::shared_ptr<TlsContext>> Create(const std::string& ca_pem, const std::string& cert_pem,
                                                    const std::string& key_pem);
  ~TlsContext();
  SSL_CTX* server() const { return server_; }
  SSL_CTX* client() const { return client_; }

 private:
  TlsContext() = default;
  SSL_CTX* server_ = nullptr;
  SSL_CTX* client_ = nullptr;
};

class TlsChannel {
 public:
  // `initiator`: this end dialled (TLS client role).
  TlsChannel(const TlsContext& context, bool initiator);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  // Starts the handshake (the initiator's first flight goes to `to_socket`).
  Status Start(std::string* to_socket);
  // Ciphertext read from the socket: decrypted bytes are appended to `plaintext`, handshake and
  // other records to send to `to_socket`. Unauthenticated on a failed handshake or a bad record:
  // the connection must then close.
  Status Feed(std::string_view ciphertext, std::string* plaintext, std::string* to_socket);
  // The same, handing each record's plaintext to `on_plaintext` as it is decrypted (valid during
  // the call only) until it returns false, so that no buffer holds a whole read's plaintext: a
  // peer link's reader puts a model's bytes straight into the model from there.
  Status Feed(std::string_view ciphertext, const std::function<bool(std::string_view)>& on_plaintext,
              std::string* to_socket);
  // Encrypts `plaintext` into `to_socket`; before the handshake completes it waits inside and
  // goes out once it has.
  Status Write(std::string_view plaintext, std::string* to_socket);

  bool established() const { return established_; }
  // The common name of the verified peer certificate (empty before the handshake completes).
  const std::string& peer_name() const { return peer_name_; }

 private:
  void Drain(std::string* to_socket);
  Status Error(int rc, const char* what);

  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;   // ciphertext from the socket (owned by ssl_)
  BIO* out_ = nullptr;  // ciphertext to the socket (owned by ssl_)
  bool established_ = false;
  std::string peer_name_;
  std::string pending_;  // plaintext written before the handshake completed
};

}  // namespace plexus::gossip
