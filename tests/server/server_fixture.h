#pragma once
// An in-process moeserve server on the demo model (port chosen by the OS), shared by a test suite.
#include <httplib.h>

#include <memory>
#include <thread>

#include "engine/engine.h"
#include "engine/startup.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/text_decoder.h"
#include "test_paths.h"

namespace moeserve::testing {

struct LocalServer {
  std::shared_ptr<model::Model> model;
  std::shared_ptr<server::Tokenizer> tokenizer;
  std::shared_ptr<engine::Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  std::thread thread;

  explicit LocalServer(int64_t max_running_requests = 16, size_t max_body = 1 << 20, int64_t speculative_steps = 0,
                       const std::string& device = "cpu") {
    const std::string dir = source_dir() + "/models/demo";
    model = model::Model::load(dir);
    tokenizer = std::make_shared<server::Tokenizer>(server::Tokenizer::load(dir));
    engine::StartupOptions so;
    so.device = device;
    so.memory_bytes = device == "cpu" ? 256ll << 20 : 0;  // CUDA: the GPU's memory x the profile's fraction
    so.max_running_requests = max_running_requests;
    so.max_model_len = 512;
    so.speculative_steps = speculative_steps;
    auto plan = engine::plan_engine(*model, so);
    engine = engine::start_engine(model, plan, device, std::make_shared<server::TokenizerTextDecoderFactory>(tokenizer));
    server::ServerOptions o;
    o.port = 0;
    o.model_name = "demo";
    o.max_body_bytes = max_body;
    o.defaults.chat_max_tokens = 24;
    http = std::make_unique<server::HttpServer>(engine, tokenizer, o);
    http->bind();
    thread = std::thread([this] { http->serve(); });
  }
  ~LocalServer() {
    http->stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", http->port());
    c.set_read_timeout(120, 0);
    return c;
  }
  int port() const { return http->port(); }
};

}  // namespace moeserve::testing
