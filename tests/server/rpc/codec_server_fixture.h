// A real gRPC server on 127.0.0.1 with a sync engine (two clients per round) over a 6-value model
// (w[4], b[2]), and two joined clients: "new" through the client's transport, which advertises
// every codec, and "old", a client from before codecs that names none; each holds its first
// task. For the tests of compressed uploads and downloads.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "client/grpc_transport.h"
#include "core/clock.h"
#include "plexus/v1/federation.grpc.pb.h"
#include "server/coordinator/sync_engine.h"
#include "server/rpc/federation_server.h"
#include "server/store/memory_store.h"
#include "tests/testing/status_matchers.h"

namespace plexus::testing {

class CodecServerFixture : public ::testing::Test {
 protected:
  // Starts the server with `info` and the model's values `initial` (zeros when empty).
  void StartWith(const ServerInfo& info, const std::vector<float>& initial = {}) {
    SyncOptions o;
    o.rounds = info.rounds_total;
    o.clients_per_round = 2;
    o.min_clients = 2;
    model_ = *ModelState::Create({{"w", {4}}, {"b", {2}}});
    std::copy(initial.begin(), initial.end(), model_.data().begin());
    engine_ = *SyncEngine::Open(o, model_, &store_, &clock_, nullptr, nullptr);
    server_ = *FederationServer::Start("127.0.0.1:0", engine_.get(), &store_, info);
    const std::string target = "127.0.0.1:" + std::to_string(server_->port());
    transport_ = MakeGrpcFederationTransport(target);
    stub_ = v1::Federation::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    ASSERT_OK(transport_->Join("new", 10, "test"));
    v1::JoinRequest join;
    join.set_client_id("old");
    join.set_num_examples(10);
    v1::JoinReply joined;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Join(&ctx, join, &joined).ok());
    task_new_ = transport_->Poll("new", 1000)->task;
    task_old_ = transport_->Poll("old", 1000)->task;
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  RealClock clock_;
  MemoryStore store_;
  ModelState model_;
  std::unique_ptr<SyncEngine> engine_;
  std::unique_ptr<FederationServer> server_;
  std::unique_ptr<FederationTransport> transport_;
  std::unique_ptr<v1::Federation::Stub> stub_;
  Task task_new_, task_old_;
};

}  // namespace plexus::testing
