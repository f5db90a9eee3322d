// Secure aggregation's messages (privacy/secagg_exchange.h) to and from their plexus.v1 form, the
// one copy both sides of the wire use: the client's transport and the server's door. What comes
// off the wire is checked here (key and share lengths, chunk sizes, stage names): InvalidArgument
// naming what is malformed. Stateless; thread-safe.
#pragma once

#include "core/status.h"
#include "plexus/v1/federation.pb.h"
#include "privacy/secagg_exchange.h"

namespace plexus {

void SecAggCallToProto(const secagg::Call& call, v1::SecAggRequest* out);
Result<secagg::Call> SecAggCallFromProto(const v1::SecAggRequest& in);

void SecAggViewToProto(const secagg::View& view, v1::SecAggReply* out);
Result<secagg::View> SecAggViewFromProto(const v1::SecAggReply& in);

}  // namespace plexus
