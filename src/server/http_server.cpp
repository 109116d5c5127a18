#include "server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>

#include "core/log.h"
#include "server/api_error.h"
#include "server/completion_response.h"
#include "server/json_text.h"
#include "server/metrics_text.h"
#include "server/request_json.h"
#include "server/tokenize_api.h"

namespace moeserve::server {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

// A request may name the model; only the served one exists (404 naming it otherwise, as OpenAI does).
void check_model_name(const std::string& asked, const std::string& served) {
  if (!asked.empty() && asked != served)
    throw ApiError(404, "not_found_error", "the model '" + asked + "' does not exist (this server serves '" + served +
                                               "')", "model");
}

// Debian's cpp-httplib 0.11 listens with a backlog of 5, so a burst of connections (64 clients at once) gets
// some refused or reset. Linux lets listen() be called again to change the backlog: find our listening socket
// by its port and raise it.
void raise_listen_backlog(int port) {
  for (int fd = 3; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int bound = addr.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port) : -1;
    if (bound == port) listen(fd, 1024);
  }
}

}  // namespace

HttpServer::HttpServer(std::shared_ptr<engine::Engine> engine, std::shared_ptr<const Tokenizer> tokenizer,
                       ServerOptions options)
    : engine_(std::move(engine)), tokenizer_(std::move(tokenizer)), options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()) {
  const int threads = options_.threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    check(port_ > 0, "cannot bind {} on any port", options_.host);
  } else {
    check(http_->bind_to_port(options_.host, options_.port), "cannot listen on {}:{} (in use, or not an address of "
          "this machine?)", options_.host, options_.port);
    port_ = options_.port;
  }
  raise_listen_backlog(port_);
}

void HttpServer::serve() { http_->listen_after_bind(); }
void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::install_routes() {
  auto& svr = *http_;
  const std::string model_name = options_.model_name;

  // Each route's method, for a 405 that names it (filled below, before the server starts; read-only after).
  auto route_methods = std::make_shared<std::map<std::string, std::string>>();
  auto get = [&svr, route_methods](const char* path, httplib::Server::Handler handler) {
    (*route_methods)[path] = "GET";
    svr.Get(path, std::move(handler));
  };
  auto post = [&svr, route_methods](const char* path, httplib::Server::Handler handler) {
    (*route_methods)[path] = "POST";
    svr.Post(path, std::move(handler));
  };
  svr.set_error_handler([route_methods](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const auto route = route_methods->find(req.path);
    if (res.status == 413) {
      send_error(res, 413, error_body("invalid_request_error", "the request body is larger than the server accepts",
                                      "", 413));
    } else if ((res.status == 404 || res.status == 400) && route != route_methods->end() && route->second != req.method) {
      res.set_header("Allow", route->second);
      send_error(res, 405, error_body("invalid_request_error", req.path + " takes " + route->second + ", not " +
                                                                   req.method, "", 405));
    } else if (res.status == 404) {
      send_error(res, 404, error_body("not_found_error", "no route " + req.method + " " + req.path, "", 404));
    } else {
      send_error(res, res.status, error_body("invalid_request_error", "the HTTP request was refused (HTTP " +
                                                                          std::to_string(res.status) + ")", "",
                                             res.status));
    }
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    }
    send_error(res, 500, error_body("internal_server_error", what, "", 500));
  });

  get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(json{{"status", "ok"}, {"running", engine_->status().running}}), "application/json");
  });
  auto model_card = [this, model_name] {
    return json{{"id", model_name}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "moeserve"},
                {"max_model_len", engine_->max_model_len()}};
  };
  get("/v1/models", [model_card](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_card()})}}), "application/json");
  });
  // OpenAI's retrieve (the SDK's models.retrieve); a path, so names with '/' in them work.
  svr.Get(R"(/v1/models/(.+))", [model_card, model_name](const httplib::Request& req, httplib::Response& res) {
    try {
      check_model_name(req.matches[1], model_name);
      res.set_content(dump(model_card()), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e.status(), e.body());
    }
  });
  // vLLM's token counting endpoints, with the served tokenizer.
  auto tokenizer_route = [this, model_name](const httplib::Request& req, httplib::Response& res, bool tokenize) {
    try {
      const json body = parse_json_object(req.body);
      check_model_name(requested_model(body), model_name);
      if (!tokenizer_) bad_request("", "this model has no tokenizer");
      res.set_content(dump(tokenize ? tokenize_response(body, *tokenizer_, engine_->max_model_len())
                                    : detokenize_response(body, *tokenizer_)),
                      "application/json");
    } catch (const ApiError& e) {
      send_error(res, e.status(), e.body());
    }
  };
  post("/tokenize", [tokenizer_route](const httplib::Request& req, httplib::Response& res) {
    tokenizer_route(req, res, true);
  });
  post("/detokenize", [tokenizer_route](const httplib::Request& req, httplib::Response& res) {
    tokenizer_route(req, res, false);
  });
  // SGLang's server-info endpoint, where bench_serving reads the speculative accept length.
  get("/get_server_info", [this, model_name](const httplib::Request&, httplib::Response& res) {
    const auto& m = engine_->metrics();
    const double steps = double(m.spec_verify_steps.load());
    json state = {{"avg_spec_accept_length",
                   steps > 0 ? json((double(m.spec_accepted_tokens.load()) + steps) / steps) : json(nullptr)}};
    res.set_content(dump(json{{"model_path", model_name},
                              {"speculative_algorithm", engine_->options().speculative_steps > 0 ? json("MTP") : json(nullptr)},
                              {"speculative_num_steps", engine_->options().speculative_steps},
                              {"max_total_num_tokens", engine_->status().pages_total * engine_->status().page_tokens},
                              {"internal_states", json::array({state})}}),
                    "application/json");
  });
  get("/metrics", [this, model_name](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(engine_->status(), engine_->metrics(), model_name), "text/plain; version=0.0.4");
  });

  auto generate = [this, model_name](ApiKind kind, const httplib::Request& req, httplib::Response& res) {
    ParsedRequest parsed;
    std::vector<int32_t> prompt;
    try {
      parsed = parse_openai_request(kind, req.body, options_.defaults);
      if (!parsed.ignored_fields.empty()) {
        std::string names;
        for (const auto& f : parsed.ignored_fields) names += (names.empty() ? "'" : ", '") + f + "'";
        spdlog::warn("{}: ignored the request fields that moeserve does not know: {}", req.path, names);
      }
      check_model_name(parsed.model, model_name);
      if (parsed.prompt_ids) {
        prompt = *parsed.prompt_ids;
      } else {
        if (!tokenizer_) bad_request(kind == ApiKind::Chat ? "messages" : "prompt",
                                     "this model has no tokenizer: send the prompt as token ids");
        prompt = kind == ApiKind::Chat ? encode_chat(*tokenizer_, parsed.messages, /*add_generation_prompt=*/true)
                                       : encode_prompt(*tokenizer_, *parsed.prompt_text, /*add_special_tokens=*/true);
      }
      if (prompt.empty()) bad_request(kind == ApiKind::Chat ? "messages" : "prompt", "the prompt is empty");
    } catch (const ApiError& e) {
      send_error(res, e.status(), e.body());
      return;
    }

    ResponseHeader header;
    header.kind = kind;
    header.id = (kind == ApiKind::Chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    header.created = unix_time();
    header.model = model_name;
    header.stream = parsed.stream;
    header.include_usage = parsed.include_usage;
    header.logprobs = parsed.params.logprobs >= 0;
    if (parsed.echo) {  // the prompt as sent, or as its ids decode
      header.echo = true;
      header.echo_first_token = prompt.front();
      header.echo_text = parsed.prompt_text ? *parsed.prompt_text
                         : tokenizer_   ? tokenizer_->decode(prompt, parsed.params.skip_special_tokens)
                                        : std::string();
    }
    if (tokenizer_)
      header.token_bytes = [tokenizer = tokenizer_](int32_t id) { return std::string(tokenizer->token_bytes(id)); };
    const bool stream = parsed.stream;
    auto response = std::make_shared<CompletionResponse>(header, parsed.n);

    // One engine request per choice; with a seed, choice i samples with seed + i (as if sent alone with it).
    auto engine = engine_;
    std::vector<uint64_t> request_ids;
    try {
      for (int i = 0; i < parsed.n; ++i) {
        engine::GenerationParams params = parsed.params;
        if (params.seed) *params.seed += uint64_t(i);
        request_ids.push_back(
            engine->submit(prompt, params, [response, i](const engine::RequestEvent& e) { response->on_event(i, e); }));
      }
    } catch (const Error& e) {
      for (uint64_t id : request_ids) engine->abort(id);
      send_error(res, 400, error_body("invalid_request_error", e.what(), parsed.max_tokens_given ? "max_tokens" : "", 400));
      return;
    }

    auto last_write = std::make_shared<Clock::time_point>(Clock::now());
    auto provider = [response, stream, last_write](size_t, httplib::DataSink& out) {
      bool finished = false;
      const std::string text = response->next(std::chrono::milliseconds(200), &finished);
      // A write to a closed connection fails, which is how a vanished client is noticed (the releaser aborts).
      if (!text.empty()) {
        if (!out.write(text.data(), text.size())) return false;
        *last_write = Clock::now();
      }
      if (finished) {
        out.done();
        return true;
      }
      // A keep-alive while waiting: an SSE comment, or JSON-insignificant whitespace before a plain body.
      if (Clock::now() - *last_write > std::chrono::seconds(1)) {
        static const std::string kPing = ": ping\n\n", kSpace = " ";
        const std::string& p = stream ? kPing : kSpace;
        if (!out.write(p.data(), p.size())) return false;
        *last_write = Clock::now();
      }
      return true;
    };
    // Whatever ended the response (client gone, an error in one choice, or all done), no choice runs on.
    auto releaser = [response, engine, request_ids](bool) {
      for (int i : response->unfinished()) engine->abort(request_ids[size_t(i)]);
    };
    if (stream) res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(stream ? "text/event-stream" : "application/json", provider, releaser);
  };

  post("/v1/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(ApiKind::Completion, req, res);
  });
  post("/v1/chat/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(ApiKind::Chat, req, res);
  });
}

}  // namespace moeserve::server
