// AdaptiveNormBound: the server's default defence against updates far larger than honest clients
// send (an upload of 3e38 values made every later version infinite). An update is refused when
// its L2 norm exceeds `factor` times the median, over the last `clients` distinct clients seen,
// of each one's latest update norm; before `min_clients` distinct clients have been seen,
// `factor` times the norm of the model it would change (no honest step moves a model by many
// times its own size).
//
// Why over clients and not over updates: a window of updates is filled by whoever sends most,
// so two clients sending tiny legal updates pulled the bound below every honest update, and
// since refused updates never entered the window it could not recover (the federation wedged).
// Here every client holds one slot whatever it sends, refused norms are recorded too (the bound
// follows what clients send, not only what it let in), and an update sent again for the same task
// changes nothing. Hence the guarantee stated in docs/security.md: while fewer than half of the
// clients in the window are an attacker's, the median lies between the smallest and the largest
// honest norm, so an honest update within `factor` times the smallest honest norm is accepted and
// no update above `factor` times the largest honest norm is.
//
// A factor of 0 turns it off. Thread-compatible (the server calls it under its lock).
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>

namespace plexus {

class AdaptiveNormBound {
 public:
  explicit AdaptiveNormBound(double factor, size_t clients = 100, size_t min_clients = 5)
      : factor_(factor), capacity_(clients < 1 ? 1 : clients), min_clients_(min_clients) {}

  bool enabled() const { return factor_ > 0; }
  // The largest norm accepted now, given the norm of the current model; +infinity when off or
  // when there is nothing to go by yet (a zero model and fewer than `min_clients` clients seen).
  double Bound(double model_norm) const;
  // Records the norm of `client_id`'s update for `task_id`, accepted or refused: the client's
  // slot holds its latest norm. The same task again (a re-send) and non-finite norms change
  // nothing.
  void Observe(const std::string& client_id, const std::string& task_id, double norm);
  // Distinct clients whose norms count now.
  size_t clients_seen() const { return slots_.size(); }

 private:
  struct Slot {
    std::string client_id;
    std::string task_id;
    double norm;
  };
  const double factor_;
  const size_t capacity_;
  const size_t min_clients_;
  std::list<Slot> slots_;  // most recently observed first
  std::unordered_map<std::string, std::list<Slot>::iterator> by_client_;
};

}  // namespace plexus
