#include "apps/plexus/certificate_authority.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <arpa/inet.h>

#include <cstdio>
#include <filesystem>
#include <memory>

namespace plexus::cli {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(FILE* p) const { std::fclose(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;

Status OpenSslError(const std::string& what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  return InternalError(what + ": " + buf);
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return false;
  }
  return name[0] != '.' && name[0] != '-';
}

Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return OpenSslError(std::string("certificate extension ") + value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return Status::Ok();
}

Result<Cert> NewCertificate(EVP_PKEY* key, const std::string& common_name, int days) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  std::unique_ptr<BIGNUM, Free> serial(BN_new());
  BN_rand(serial.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY);
  BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get()));
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("Plexus"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                             -1, -1, 0);
  return cert;
}

Status WritePem(const std::string& path, EVP_PKEY* key, X509* cert) {
  std::unique_ptr<FILE, Free> f(std::fopen(path.c_str(), "w"));
  if (!f) return InvalidArgumentError("cannot write '" + path + "'");
  if (key) {
    ::chmod(path.c_str(), 0600);
    if (!PEM_write_PrivateKey(f.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) return OpenSslError("write key");
  } else if (!PEM_write_X509(f.get(), cert)) {
    return OpenSslError("write certificate");
  }
  return Status::Ok();
}

}  // namespace

Status CreateCertificateAuthority(const std::string& dir, int days) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string key_path = dir + "/ca.key";
  if (std::filesystem::exists(key_path)) {
    return AlreadyExistsError("'" + key_path + "' exists; refusing to replace the CA (remove it first)");
  }
  Key key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("generate CA key");
  PLEXUS_ASSIGN_OR_RETURN(Cert cert, NewCertificate(key.get(), "Plexus CA", days));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  PLEXUS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  PLEXUS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  PLEXUS_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (!X509_sign(cert.get(), key.get(), EVP_sha256())) return OpenSslError("sign CA certificate");
  PLEXUS_RETURN_IF_ERROR(WritePem(key_path, key.get(), nullptr));
  return WritePem(dir + "/ca.crt", nullptr, cert.get());
}

Status IssueCertificate(const std::string& dir, const std::string& name, CertificateKind kind, int days) {
  const bool server = kind == CertificateKind::kServer;
  if (!ValidName(name)) {
    return InvalidArgumentError("'" + name + "' is not a valid name (letters, digits, '-', '_' and '.', at most 64)");
  }
  if (name == "ca") return InvalidArgumentError("'ca' is the authority's own file name");
  std::unique_ptr<FILE, Free> ca_key_file(std::fopen((dir + "/ca.key").c_str(), "r"));
  std::unique_ptr<FILE, Free> ca_cert_file(std::fopen((dir + "/ca.crt").c_str(), "r"));
  if (!ca_key_file || !ca_cert_file) {
    return NotFoundError("no CA in '" + dir + "' (run `plexus certs init --dir " + dir + "` first)");
  }
  Key ca_key(PEM_read_PrivateKey(ca_key_file.get(), nullptr, nullptr, nullptr));
  Cert ca_cert(PEM_read_X509(ca_cert_file.get(), nullptr, nullptr, nullptr));
  if (!ca_key || !ca_cert) return OpenSslError("read the CA in '" + dir + "'");

  Key key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("generate key");
  PLEXUS_ASSIGN_OR_RETURN(Cert cert, NewCertificate(key.get(), name, days));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  PLEXUS_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
  PLEXUS_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca_cert.get(), NID_key_usage, "critical,digitalSignature,keyEncipherment"));
  PLEXUS_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_ext_key_usage,
                                      server                           ? "serverAuth"
                                      : kind == CertificateKind::kPeer ? "serverAuth,clientAuth"
                                                                       : "clientAuth"));
  PLEXUS_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid:always"));
  if (server) {
    unsigned char buf[16];
    const bool ip = inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
    const std::string san = (ip ? "IP:" : "DNS:") + name;
    PLEXUS_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_subject_alt_name, san.c_str()));
  }
  if (!X509_sign(cert.get(), ca_key.get(), EVP_sha256())) return OpenSslError("sign certificate");
  PLEXUS_RETURN_IF_ERROR(WritePem(dir + "/" + name + ".key", key.get(), nullptr));
  return WritePem(dir + "/" + name + ".crt", nullptr, cert.get());
}

}  // namespace plexus::cli
