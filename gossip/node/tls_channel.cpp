#include "gossip/node/tls_channel.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

namespace plexus::gossip {
namespace {

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? "no detail" : out;
}

Status LoadInto(SSL_CTX* ctx, const std::string& ca_pem, const std::string& cert_pem, const std::string& key_pem) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  std::unique_ptr<BIO, decltype(&BIO_free)> ca(BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())),
                                               &BIO_free);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (X509* c = PEM_read_bio_X509(ca.get(), nullptr, nullptr, nullptr)) {
    added += X509_STORE_add_cert(store, c);
    X509_free(c);
  }
  ERR_clear_error();  // the end of the PEM list reads as an error
  if (added == 0) return InvalidArgumentError("--tls-ca holds no certificate");
  std::unique_ptr<BIO, decltype(&BIO_free)> cert(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())),
                                                 &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> x(PEM_read_bio_X509(cert.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!x || SSL_CTX_use_certificate(ctx, x.get()) != 1) {
    return InvalidArgumentError("--tls-cert is not a PEM certificate: " + OpenSslErrors());
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> key(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())),
                                                &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> k(PEM_read_bio_PrivateKey(key.get(), nullptr, nullptr, nullptr),
                                                        &EVP_PKEY_free);
  if (!k || SSL_CTX_use_PrivateKey(ctx, k.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    return InvalidArgumentError("--tls-key is not the private key of --tls-cert: " + OpenSslErrors());
  }
  return Status::Ok();
}

// Peers offer no ALPN. A gRPC client does (h2) and gives up on a server that selects none, with
// nothing better to say than that: selecting h2 lets it reach the HTTP/2 answer that tells its
// user this is a peer (http2_refusal.h).
int SelectH2(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
             void*) {
  static const unsigned char kH2[] = {2, 'h', '2'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kH2, sizeof kH2, in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::Create(const std::string& ca_pem, const std::string& cert_pem,
                                                       const std::string& key_pem) {
  std::shared_ptr<TlsContext> c(new TlsContext());
  c->server_ = SSL_CTX_new(TLS_server_method());
  c->client_ = SSL_CTX_new(TLS_client_method());
  if (!c->server_ || !c->client_) return InternalError("SSL_CTX_new: " + OpenSslErrors());
  PLEXUS_RETURN_IF_ERROR(LoadInto(c->server_, ca_pem, cert_pem, key_pem));
  SSL_CTX_set_alpn_select_cb(c->server_, SelectH2, nullptr);
  PLEXUS_RETURN_IF_ERROR(LoadInto(c->client_, ca_pem, cert_pem, key_pem));
  return c;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(server_);
  SSL_CTX_free(client_);
}

TlsChannel::TlsChannel(const TlsContext& context, bool initiator) {
  ssl_ = SSL_new(initiator ? context.client() : context.server());
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(in_, -1);  // an empty read BIO means "want more", not end of stream
  SSL_set_bio(ssl_, in_, out_);
  if (initiator) {
    SSL_set_connect_state(ssl_);
  } else {
    SSL_set_accept_state(ssl_);
  }
}

TlsChannel::~TlsChannel() { SSL_free(ssl_); }

void TlsChannel::Drain(std::string* to_socket) {
  // Room for all of it at once: appending record by record to a growing string copied a model's
  // ciphertext again at every doubling (a tenth of a TLS exchange's time, with Feed's).
  to_socket->reserve(to_socket->size() + BIO_ctrl_pending(out_));
  char buf[16384];
  int n;
  while ((n = BIO_read(out_, buf, sizeof buf)) > 0) to_socket->append(buf, static_cast<size_t>(n));
}

Status TlsChannel::Error(int rc, const char* what) {
  const int e = SSL_get_error(ssl_, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Status::Ok();
  if (e == SSL_ERROR_ZERO_RETURN) return UnavailableError("the peer closed the TLS session");
  const long verify = SSL_get_verify_result(ssl_);
  std::string detail = OpenSslErrors();
  if (verify != X509_V_OK) detail = X509_verify_cert_error_string(verify);
  return UnauthenticatedError(std::string("TLS ") + what + ": " + detail);
}

Status TlsChannel::Start(std::string* to_socket) {
  const int rc = SSL_do_handshake(ssl_);
  Status s = rc == 1 ? Status::Ok() : Error(rc, "handshake");
  Drain(to_socket);
  return s;
}

Status TlsChannel::Feed(std::string_view ciphertext, std::string* plaintext, std::string* to_socket) {
  // The plaintext is never longer than the ciphertext waiting for it: room for all of it at once
  // (see Drain).
  plaintext->reserve(plaintext->size() + BIO_ctrl_pending(in_) + ciphertext.size());
  return Feed(
      ciphertext,
      [plaintext](std::string_view piece) {
        plaintext->append(piece);
        return true;
      },
      to_socket);
}

Status TlsChannel::Feed(std::string_view ciphertext, const std::function<bool(std::string_view)>& on_plaintext,
                        std::string* to_socket) {
  if (!ciphertext.empty() && BIO_write(in_, ciphertext.data(), static_cast<int>(ciphertext.size())) <= 0) {
    return InternalError("BIO_write failed");
  }
  if (!established_) {
    const int rc = SSL_do_handshake(ssl_);
    if (rc != 1) {
      Status s = Error(rc, "handshake");
      Drain(to_socket);
      return s;
    }
    established_ = true;
    X509* cert = SSL_get1_peer_certificate(ssl_);
    if (cert == nullptr) return UnauthenticatedError("TLS peer presented no certificate");
    char cn[256] = {0};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    X509_free(cert);
    peer_name_ = cn;
    if (!pending_.empty()) {
      std::string p = std::move(pending_);
      pending_.clear();
      PLEXUS_RETURN_IF_ERROR(Write(p, to_socket));
    }
  }
  char buf[16384];
  for (;;) {
    const int n = SSL_read(ssl_, buf, sizeof buf);
    if (n > 0) {
      if (on_plaintext(std::string_view(buf, static_cast<size_t>(n)))) continue;
      Drain(to_socket);
      return Status::Ok();
    }
    Status s = Error(n, "read");
    Drain(to_socket);
    return s;
  }
}

Status TlsChannel::Write(std::string_view plaintext, std::string* to_socket) {
  if (!established_) {
    pending_.append(plaintext);
    return Status::Ok();
  }
  size_t done = 0;
  while (done < plaintext.size()) {
    const int n =
        SSL_write(ssl_, plaintext.data() + done, static_cast<int>(std::min<size_t>(plaintext.size() - done, 1 << 20)));
    if (n <= 0) return Error(n, "write");
    done += static_cast<size_t>(n);
  }
  Drain(to_socket);
  return Status::Ok();
}

}  // namespace plexus::gossip
