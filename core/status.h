// Status and Result<T>: errors as values across module boundaries.
// A Status is a code (a subset of gRPC's, with the same numbers so server/rpc maps 1:1) and a
// message a person can act on. OK carries no message and costs nothing to copy.
// Thread-compatible.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace plexus {

// Retry guidance: kUnavailable -> back off and retry; kAborted -> redo the transaction;
// the others are not fixed by retrying the same request.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,  // bad shape, NaN, bad config, malformed bytes
  kDeadlineExceeded = 4,
  kNotFound = 5,  // unknown client, task or version
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,   // oversized payload
  kFailedPrecondition = 9,  // stale base version, expired task, federation finished
  kAborted = 10,
  kOutOfRange = 11,
  kInternal = 13,
  kUnavailable = 14,      // peer down: back off, retry
  kDataLoss = 15,         // hash mismatch, corrupt file
  kUnauthenticated = 16,  // no or invalid credentials
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

  // Returns a status with the same code and "context: message", keeping the cause.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_ && a.message_ == b.message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status UnauthenticatedError(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  // By value, so that `for (auto& x : *F())` does not dangle when F returns a temporary.
  T value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

#define PLEXUS_CONCAT_INNER_(a, b) a##b
#define PLEXUS_CONCAT_(a, b) PLEXUS_CONCAT_INNER_(a, b)

#define PLEXUS_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::plexus::Status plexus_status_ = (expr);        \
    if (!plexus_status_.ok()) return plexus_status_; \
  } while (0)

#define PLEXUS_ASSIGN_OR_RETURN(lhs, expr) \
  PLEXUS_ASSIGN_OR_RETURN_IMPL_(PLEXUS_CONCAT_(plexus_result_, __LINE__), lhs, expr)
#define PLEXUS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

}  // namespace plexus
