// The OpenAI-compatible server over real HTTP: responses, streaming, stop strings, usage; every kind of bad
// input gets a 4xx with an OpenAI error object, leaks nothing, and the server keeps serving; a client that
// disconnects mid-stream frees its request; 64 concurrent streams all complete.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "server/server_fixture.h"

namespace moeserve {
namespace {

using nlohmann::json;

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new testing::LocalServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static json post(const std::string& path, const json& body, int* status = nullptr) {
    auto r = server_->client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << "no response";
    if (!r) return {};
    if (status) *status = r->status;
    return json::parse(r->body);
  }
  // SSE "data:" payloads of a streaming response, [DONE] included.
  static std::vector<std::string> events(const std::string& path, const json& body) {
    auto r = server_->client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200);
    std::vector<std::string> out;
    if (!r) return out;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    std::regex line("data: (.*)");
    for (std::sregex_iterator it(r->body.begin(), r->body.end(), line), end; it != end; ++it) out.push_back((*it)[1]);
    return out;
  }
  static void expect_no_leak() {
    server_->engine->wait_idle();
    auto s = server_->engine->status();
    EXPECT_EQ(s.running + s.waiting, 0);
    EXPECT_EQ(s.pages_free, s.pages_total);
    EXPECT_EQ(s.slots_free, s.slots_total);
    auto m = server_->client().Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("moeserve_num_requests_running{model_name=\"demo\"} 0"), std::string::npos);
    EXPECT_NE(m->body.find("moeserve_kv_pages{model_name=\"demo\",pool=\"csa_kv\",state=\"used\"} 0"),
              std::string::npos);
  }
  static std::vector<int32_t> greedy_alone(const std::vector<int32_t>& prompt, int64_t n) {
    engine::GenerateOptions o;
    o.max_new_tokens = n;
    return engine::generate(*server_->model, prompt, o).output_ids;
  }
  static testing::LocalServer* server_;
};
testing::LocalServer* Server::server_ = nullptr;

TEST_F(Server, HealthAndModels) {
  auto h = server_->client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = server_->client().Get("/v1/models");
  ASSERT_TRUE(m);
  auto j = json::parse(m->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "demo");
  EXPECT_EQ(j["data"][0]["max_model_len"], 512);
  auto one = server_->client().Get("/v1/models/demo");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body), j["data"][0]);
  auto other = server_->client().Get("/v1/models/gpt-4");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(json::parse(other->body)["error"]["param"], "model");
}

TEST_F(Server, TokenizeAndDetokenizeUseTheServedTokenizer) {
  const std::string text = "The old man said that it was late.";
  int status = 0;
  json t = post("/tokenize", {{"model", "demo"}, {"prompt", text}, {"return_token_strs", true}}, &status);
  ASSERT_EQ(status, 200) << t.dump();
  const auto ids = server_->tokenizer->encode(text, true);
  EXPECT_EQ(t["tokens"], ids);
  EXPECT_EQ(t["count"], ids.size());
  EXPECT_EQ(t["max_model_len"], 512);
  std::string joined;
  for (const auto& s : t["token_strs"]) joined += s.get<std::string>();
  EXPECT_EQ(joined, server_->tokenizer->decode(ids));
  json plain = post("/tokenize", {{"prompt", text}, {"add_special_tokens", false}});
  EXPECT_EQ(plain["tokens"], server_->tokenizer->encode(text, false));
  EXPECT_TRUE(plain["token_strs"].is_null());
  EXPECT_EQ(post("/detokenize", {{"tokens", plain["tokens"]}})["prompt"], text);
  // Messages are rendered as the chat route renders them: the same prompt_tokens.
  const json messages = {{{"role", "user"}, {"content", "Hello!"}}};
  json chat = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  EXPECT_EQ(post("/tokenize", {{"messages", messages}})["count"], chat["usage"]["prompt_tokens"]);
  // Bad bodies name the field.
  post("/tokenize", {{"prompt", 5}}, &status);
  EXPECT_EQ(status, 400);
  json both = post("/tokenize", {{"prompt", "a"}, {"messages", messages}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(both["error"]["message"].get<std::string>().find("exactly one of"), std::string::npos);
  json bad = post("/detokenize", {{"tokens", {1, -2}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "tokens");
  post("/detokenize", {{"tokens", {1}}, {"model", "nope"}}, &status);
  EXPECT_EQ(status, 404);
}

TEST_F(Server, CompletionIsTheGreedyContinuation) {
  json body = {{"model", "demo"}, {"prompt", "The old man said that"}, {"max_tokens", 8}, {"temperature", 0},
               {"ignore_eos", true}};
  int status = 0;
  json r = post("/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  auto prompt = server_->tokenizer->encode("The old man said that", true);
  auto tokens = greedy_alone(prompt, 8);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], server_->tokenizer->decode(tokens, true));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 8);
  EXPECT_EQ(r["usage"]["total_tokens"], prompt.size() + 8);
  // Token ids as the prompt give the same.
  json by_ids = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(by_ids["choices"][0]["text"], r["choices"][0]["text"]);
  expect_no_leak();
}

TEST_F(Server, StreamingChatMatchesNonStreaming) {
  json body = {{"model", "demo"},
               {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello!"}}}},
               {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  json whole = post("/v1/chat/completions", body);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto ev = events("/v1/chat/completions", body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string content;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    json c = json::parse(ev[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c.contains("usage")) {
      usage = c["usage"];
      EXPECT_TRUE(c["choices"].empty());
      continue;
    }
    if (i == 0) EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
    if (c["choices"][0]["delta"].contains("content")) content += c["choices"][0]["delta"]["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 12);
  EXPECT_EQ(usage["prompt_tokens"], whole["usage"]["prompt_tokens"]);
  expect_no_leak();
}

TEST_F(Server, SeveralChoicesAreEachWhatTheirSeedGivesAlone) {
  const json base = {{"prompt", "The old house"}, {"max_tokens", 10}, {"temperature", 0.9}, {"seed", 41},
                     {"ignore_eos", true}};
  json body = base;
  body["n"] = 3;
  int status = 0;
  json r = post("/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 3u);
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    json alone = base;
    alone["seed"] = 41 + i;  // choice i samples as a request with seed + i
    json one = post("/v1/completions", alone);
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["text"], one["choices"][0]["text"]) << "choice " << i;
    EXPECT_EQ(r["choices"][i]["finish_reason"], "length");
    EXPECT_EQ(r["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]);  // the prompt counts once
    distinct.insert(r["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u);  // the seeds differ, and so (at temperature 0.9) do the samples
  EXPECT_EQ(r["usage"]["completion_tokens"], 30);

  // Streaming chat: each choice's chunks carry its index, the first one the role; put together they are the
  // non-streaming answer, and the usage chunk comes once, after every choice has finished.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}}, {"max_tokens", 6},
               {"temperature", 0.9}, {"seed", 7}, {"ignore_eos", true}, {"n", 2}};
  json whole = post("/v1/chat/completions", chat);
  chat["stream"] = true;
  chat["stream_options"] = {{"include_usage", true}};
  auto ev = events("/v1/chat/completions", chat);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::vector<std::string> content(2);
  std::vector<int> chunks(2, 0), finishes(2, 0);
  json usage;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    json c = json::parse(ev[i]);
    if (c.contains("usage")) {
      EXPECT_EQ(i + 2, ev.size()) << "the usage chunk is the last before [DONE]";
      usage = c["usage"];
      continue;
    }
    const int k = c["choices"][0]["index"];
    ASSERT_TRUE(k == 0 || k == 1) << ev[i];
    EXPECT_EQ(finishes[k], 0) << "a chunk of choice " << k << " after its finish";
    const json& delta = c["choices"][0]["delta"];
    EXPECT_EQ(delta.contains("role"), chunks[k]++ == 0) << ev[i];
    if (delta.contains("content")) content[k] += delta["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) ++finishes[k];
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(finishes[k], 1);
    EXPECT_EQ(content[k], whole["choices"][k]["message"]["content"]) << "choice " << k;
  }
  EXPECT_EQ(usage["completion_tokens"], 12);
  EXPECT_EQ(usage["prompt_tokens"], whole["usage"]["prompt_tokens"]);

  // Greedy choices are all the greedy continuation.
  json greedy = post("/v1/completions", {{"prompt", "The old house"}, {"max_tokens", 5}, {"temperature", 0}, {"n", 2}});
  EXPECT_EQ(greedy["choices"][0]["text"], greedy["choices"][1]["text"]);
  expect_no_leak();
}

TEST_F(Server, LogprobsAreTheModelsInEachApisForm) {
  const std::string text = "The old man said that";
  const auto prompt = server_->tokenizer->encode(text, true);
  engine::GenerateOptions o;
  o.max_new_tokens = 5;
  o.keep_logits = true;
  const auto ref = engine::generate(*server_->model, prompt, o);  // greedy, logits at every position
  const int64_t vocab = ref.logits.shape()[1];
  auto want = [&](size_t j, int top) {
    return engine::token_logprobs(ref.logits.f32() + (int64_t(prompt.size()) - 1 + int64_t(j)) * vocab, vocab,
                                  ref.output_ids[j], top);
  };
  auto bytes_of = [&](int32_t id) { return std::string(server_->tokenizer->token_bytes(id)); };

  // Completions: tokens, token_logprobs, top_logprobs keyed by token text, text_offset in bytes.
  json body = {{"prompt", text}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}};
  json r = post("/v1/completions", body);
  const json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u) << r.dump();
  int64_t offset = 0;
  for (size_t j = 0; j < 5; ++j) {
    const auto w = want(j, 2);
    EXPECT_EQ(lp["tokens"][j], bytes_of(ref.output_ids[j]));
    EXPECT_NEAR(lp["token_logprobs"][j].get<double>(), w.logprob, 1e-4);
    ASSERT_EQ(lp["top_logprobs"][j].size(), 2u);
    for (const auto& [id, value] : w.top) EXPECT_NEAR(lp["top_logprobs"][j][bytes_of(id)].get<double>(), value, 1e-4);
    EXPECT_EQ(lp["text_offset"][j], offset);
    offset += int64_t(bytes_of(ref.output_ids[j]).size());
  }
  // Streamed, the same entries arrive spread over the chunks.
  body["stream"] = true;
  json streamed = json::array();
  for (const auto& e : events("/v1/completions", body)) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e)["choices"][0]["logprobs"];
    if (!c.is_null())
      for (const auto& v : c["token_logprobs"]) streamed.push_back(v);
  }
  EXPECT_EQ(streamed, lp["token_logprobs"]);

  // Chat: content entries with the token's text and bytes, and its alternatives; one per completion token.
  json chat = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hello!"}}}},
                                            {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true},
                                            {"logprobs", true}, {"top_logprobs", 3}, {"n", 2}});
  for (int k = 0; k < 2; ++k) {
    const json& content = chat["choices"][k]["logprobs"]["content"];
    ASSERT_EQ(content.size(), 4u) << chat.dump();
    std::string joined;
    for (const json& t : content) {
      ASSERT_EQ(t["top_logprobs"].size(), 3u);
      EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);  // greedy: the likeliest
      EXPECT_EQ(t["top_logprobs"][0]["logprob"], t["logprob"]);
      EXPECT_LE(t["logprob"].get<double>(), 0.0);
      for (const auto& b : t["bytes"]) joined.push_back(char(b.get<int>()));
    }
    EXPECT_EQ(joined, chat["choices"][k]["message"]["content"]);
  }
  EXPECT_TRUE(post("/v1/completions", {{"prompt", text}, {"max_tokens", 2}})["choices"][0]["logprobs"].is_null());
  expect_no_leak();
}

// Echo: the prompt before the output; with logprobs, the prompt's tokens too (the first without a value), as
// evaluation harnesses read a continuation's loglikelihood (echo, logprobs 1, max_tokens 1).
TEST_F(Server, EchoReturnsThePromptAndItsLogprobs) {
  const std::string context = "The old man said that", continuation = " the house was old";
  const auto ids = server_->tokenizer->encode(context + continuation, true);
  json r = post("/v1/completions", {{"prompt", context + continuation}, {"max_tokens", 1}, {"temperature", 0},
                                    {"echo", true}, {"logprobs", 1}, {"ignore_eos", true}});
  const json& choice = r["choices"][0];
  const auto out = greedy_alone(ids, 1);
  EXPECT_EQ(choice["text"], context + continuation + server_->tokenizer->decode(out, true));
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size() + 1) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  const Tensor ref = engine::all_logits(*server_->model, ids, 0, model::Numerics{});
  const int64_t vocab = ref.shape()[1];
  double continuation_logprob = 0;
  for (size_t j = 1; j <= ids.size(); ++j) {
    const int32_t token = j < ids.size() ? ids[j] : out[0];
    const auto want = engine::token_logprobs(ref.f32() + int64_t(j - 1) * vocab, vocab, token, 1);
    EXPECT_EQ(lp["tokens"][j], std::string(server_->tokenizer->token_bytes(token)));
    EXPECT_NEAR(lp["token_logprobs"][j].get<double>(), want.logprob, 1e-4) << "position " << j;
    ASSERT_EQ(lp["top_logprobs"][j].size(), 1u);
    if (j >= server_->tokenizer->encode(context, true).size() && j < ids.size())
      continuation_logprob += lp["token_logprobs"][j].get<double>();
  }
  EXPECT_LT(continuation_logprob, 0.0);
  // Token ids echo as they decode; without logprobs only the text; streamed, the first chunk starts with it.
  json by_ids = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(by_ids["choices"][0]["text"].get<std::string>().rfind(server_->tokenizer->decode(ids, true), 0), 0u);
  EXPECT_TRUE(by_ids["choices"][0]["logprobs"].is_null());
  auto ev = events("/v1/completions", {{"prompt", context}, {"max_tokens", 2}, {"echo", true}, {"stream", true}});
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(json::parse(ev[0])["choices"][0]["text"].get<std::string>().rfind(context, 0), 0u) << ev[0];
  expect_no_leak();
}

TEST_F(Server, StopStringEndsTheTextBeforeIt) {
  json body = {{"prompt", "It was a"}, {"max_tokens", 30}, {"temperature", 0}, {"ignore_eos", true}};
  std::string full = post("/v1/completions", body)["choices"][0]["text"];
  ASSERT_GE(full.size(), 6u);
  std::string stop = full.substr(3, 3);  // a stop string first occurring at byte 3 or earlier
  size_t first = full.find(stop);
  body["stop"] = {stop};
  json r = post("/v1/completions", body);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, first));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  body["stream"] = true;
  std::string streamed;
  for (const auto& e : events("/v1/completions", body))
    if (e != "[DONE]") streamed += json::parse(e)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, full.substr(0, first));
  expect_no_leak();
}

TEST_F(Server, BadInputGets4xxWithAnErrorObject) {
  auto expect_error = [](const std::string& path, const std::string& raw, int want_status, const std::string& want) {
    auto r = server_->client().Post(path.c_str(), raw, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, want_status) << raw << " -> " << r->body;
    json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["code"], want_status);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(want), std::string::npos) << j.dump();
  };
  const std::string chat = "/v1/chat/completions", completions = "/v1/completions";
  expect_error(chat, "{\"messages\": [", 400, "not valid JSON");
  expect_error(chat, "[1, 2]", 400, "must be a JSON object");
  expect_error(chat, R"({"model": "demo"})", 400, "'messages' is required");
  expect_error(chat, R"({"messages": []})", 400, "'messages' must not be empty");
  expect_error(chat, R"({"messages": "hi"})", 400, "'messages' must be an array");
  expect_error(chat, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content");
  expect_error(chat, R"({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})", 404,
               "the model 'gpt-4' does not exist");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})", 400,
               "'max_tokens' must be >= 1");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -3})", 400,
               "'max_tokens' must be >= 1");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "10"})", 400,
               "'max_tokens' must be an integer");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000})", 400,
               "maximum context length is 512 tokens");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})", 400,
               "'temperature' must be a number");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"})", 400,
               "'stream' must be true or false");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}})",
               400, "'response_format' is not supported");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})", 400,
               "tools are supported only with tool_choice \"none\"");
  expect_error(completions, R"({"prompt": "hi", "suffix": "end"})", 400, "'suffix' is not supported");
  expect_error(completions, R"({"prompt": "hi", "n": 0})", 400, "'n' must be >= 1");
  expect_error(completions, R"({"prompt": "hi", "n": 129})", 400, "'n' must be at most 128");
  expect_error(completions, R"({"prompt": 42})", 400, "'prompt' must be a string");
  expect_error(completions, R"({"prompt": [1, 99999]})", 400, "outside the vocabulary");
  std::string long_prompt(6000, 'x');
  for (size_t i = 0; i < long_prompt.size(); i += 2) long_prompt[i] = ' ';
  expect_error(completions, json{{"prompt", long_prompt}, {"max_tokens", 5}}.dump(), 400,
               "maximum context length is 512 tokens");
  expect_error(completions, std::string("{\"prompt\": \"bad \xff\xfe utf8\"}"), 400, "not valid UTF-8");
  expect_error(completions, json{{"prompt", std::string(2 << 20, 'a')}}.dump(), 413, "larger than the server accepts");
  // After all that, nothing leaked and a normal request succeeds.
  expect_no_leak();
  int status = 0;
  json ok = post("/v1/completions", {{"prompt", "Yes"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200) << ok.dump();
  // A field no API defines is ignored (and logged), as vLLM does.
  ok = post("/v1/completions", {{"prompt", "Yes"}, {"max_tokens", 2}, {"no_such_field", 1}}, &status);
  EXPECT_EQ(status, 200) << ok.dump();
}

// Opens a raw connection, sends a streaming request, reads the first bytes and hangs up.
void disconnect_mid_stream(int port, const std::string& body) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string req = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
  char buf[512];
  ASSERT_GT(recv(fd, buf, sizeof(buf), 0), 0);  // headers and maybe a first chunk
  close(fd);
}

TEST_F(Server, WrongMethodIsA405NamingTheRightOne) {
  auto r = server_->client().Get("/v1/chat/completions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(r->body)["error"]["message"], "/v1/chat/completions takes POST, not GET");
  r = server_->client().Post("/metrics", "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET");
  r = server_->client().Get("/v2/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["message"], "no route GET /v2/nothing");
  expect_no_leak();
}

TEST_F(Server, ClientDisconnectAbortsTheRequest) {
  uint64_t before = server_->engine->metrics().requests_aborted.load();
  disconnect_mid_stream(server_->port(), json{{"prompt", "Once"}, {"max_tokens", 400}, {"stream", true},
                                              {"ignore_eos", true}}.dump());
  for (int i = 0; i < 200 && server_->engine->metrics().requests_aborted.load() == before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(server_->engine->metrics().requests_aborted.load(), before + 1);
  expect_no_leak();
  json ok = post("/v1/completions", {{"prompt", "Again"}, {"max_tokens", 2}});
  EXPECT_EQ(ok["choices"][0]["finish_reason"].is_string(), true);
  // With several choices, every one of them is aborted.
  before = server_->engine->metrics().requests_aborted.load();
  disconnect_mid_stream(server_->port(), json{{"prompt", "Once"}, {"max_tokens", 400}, {"stream", true},
                                              {"ignore_eos", true}, {"n", 3}}.dump());
  for (int i = 0; i < 200 && server_->engine->metrics().requests_aborted.load() < before + 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(server_->engine->metrics().requests_aborted.load(), before + 3);
  expect_no_leak();
}

TEST_F(Server, SixtyFourConcurrentStreamsAllComplete) {
  std::vector<std::future<std::pair<int, std::string>>> futures;
  for (int i = 0; i < 64; ++i)
    futures.push_back(std::async(std::launch::async, [i] {
      json body = {{"messages", {{{"role", "user"}, {"content", "Tell me about day " + std::to_string(i)}}}},
                   {"max_tokens", 6}, {"temperature", 0.7}, {"seed", i}, {"ignore_eos", true}, {"stream", true}};
      auto r = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
      return std::make_pair(r ? r->status : -1, r ? r->body : httplib::to_string(r.error()));
    }));
  int completed = 0;
  for (auto& f : futures) {
    auto [status, body] = f.get();
    EXPECT_EQ(status, 200) << body;
    if (body.find("\"finish_reason\":\"length\"") != std::string::npos &&
        body.find("data: [DONE]") != std::string::npos)
      ++completed;
  }
  EXPECT_EQ(completed, 64);
  expect_no_leak();
}

}  // namespace
}  // namespace moeserve
