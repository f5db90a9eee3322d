// The wire format of training jobs and their outcomes between simulator processes (rank 0 and the
// training ranks of `mpirun -np R plexus sim`): fixed-width fields and length-prefixed byte
// strings with 64-bit lengths. No MPI here, so it is built and tested with or without MPI. Both ends
// are the same binary on the same kind of machine, so host byte order is fine. Decoders check
// every length against what is left before reading. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "compute/trainer.h"
#include "core/status.h"
#include "simulations/task_runner.h"

namespace plexus {

// A job: its key, its training options, whether labels are flipped (attack) and its example
// indices. The base model travels separately, once per rank.
std::string EncodeJob(uint64_t key, const TrainJob& job);
// False when `bytes` is not exactly one encoded job; `job->base` is left alone.
bool DecodeJob(std::string_view bytes, uint64_t* key, TrainJob* job);

// A fetch: rank 0 asks a training rank for the outcome of job `key`.
std::string EncodeFetch(uint64_t key);
// False unless `bytes` is exactly one encoded fetch.
bool DecodeFetch(std::string_view bytes, uint64_t* key);

// An outcome: the trained weights with examples, steps and loss; or the training error.
std::string EncodeOutcome(const Result<TrainOutcome>& r);
// The outcome, or its error with `rank` named; Internal for malformed bytes.
Result<TrainOutcome> DecodeOutcome(std::string_view bytes, int rank);

}  // namespace plexus
