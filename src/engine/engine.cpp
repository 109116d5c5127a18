#include "engine/engine.h"

#include <algorithm>
#include <deque>
#include <limits>

#include "core/log.h"
#include "engine/speculative.h"

namespace moeserve::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
    case FinishReason::None: break;
  }
  return "";
}

namespace {

// Before min_tokens, the stop tokens (the model's EOS unless ignore_eos, and stop_token_ids) cannot be drawn: the
// draw sees their logits at -inf, and they are restored after it, so logprobs stay those of the raw logits.
class StopTokenMask {
 public:
  // `ahead`: tokens between the request's output so far and the one drawn from `row` (speculative rows).
  StopTokenMask(const Request& r, float* row, int64_t vocab, int64_t ahead = 0) : row_(row) {
    if (int64_t(r.output.size()) + ahead >= r.params.min_tokens) return;
    for (int64_t id : r.params.stop_token_ids)
      if (id >= 0 && id < vocab) {
        saved_.emplace_back(id, row[id]);
        row[id] = -std::numeric_limits<float>::infinity();
      }
  }
  ~StopTokenMask() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) row_[it->first] = it->second;  // repeated ids: first value last
  }
  StopTokenMask(const StopTokenMask&) = delete;
  StopTokenMask& operator=(const StopTokenMask&) = delete;

 private:
  float* row_;
  std::vector<std::pair<int64_t, float>> saved_;
};

// Whether r's rows in this step are needed on the host: logprobs of the token drawn, the prompt's logprobs while it
// is prefilled, or stop tokens masked by min_tokens.
bool draws_on_host(const Request& r) {
  return r.params.logprobs >= 0 || (r.params.prompt_logprobs >= 0 && r.prefilling()) ||
         (int64_t(r.output.size()) < r.params.min_tokens && !r.params.stop_token_ids.empty());
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Largest prefix length <= n that does not end inside a UTF-8 sequence.
size_t utf8_boundary(const std::string& s, size_t n) {
  while (n > 0 && n < s.size() && (uint8_t(s[n]) & 0xC0) == 0x80) --n;
  return n;
}
}  // namespace

Engine::Engine(std::shared_ptr<const model::Model> model, std::shared_ptr<const TextDecoderFactory> decoder,
               EngineOptions options)
    : Engine(make_cpu_backend(std::move(model), options.speculative_steps > 0 ? options.speculative_steps + 1 : 0,
                              options.limits.max_running_requests, options.kv_pages),
             std::move(decoder), options) {}

Engine::Engine(std::unique_ptr<ForwardBackend> backend, std::shared_ptr<const TextDecoderFactory> decoder,
               EngineOptions options)
    : backend_(std::move(backend)),
      decoder_(std::move(decoder)),
      options_(options),
      cache_(backend_->cache()),
      scheduler_(cache_, options.limits, options.speculative_steps > 0 ? options.speculative_steps + 1 : 0) {
  check(cache_.slots_total() == options.limits.max_running_requests && cache_.pages_total() == options.kv_pages,
        "internal: the backend's cache ({} slots, {} pages) differs from the engine options ({} slots, {} pages)",
        cache_.slots_total(), cache_.pages_total(), options.limits.max_running_requests, options.kv_pages);
  check(options.limits.max_batch_tokens >= 1, "max batch tokens must be >= 1");
  check(options.speculative_steps >= 0 && options.speculative_steps <= 16,
        "--speculative-num-steps must be between 1 and 16, got {}", options.speculative_steps);
  check(options.speculative_steps == 0 || backend_->has_mtp(),
        "speculative decoding with MTP needs the checkpoint's mtp.0.* weights on a backend that runs them ({} "
        "backend)", backend_->name());
  const int64_t capacity = options.kv_pages * cache_.layout().page_tokens;
  max_model_len_ = options.max_model_len > 0 ? options.max_model_len : backend_->config().max_position_embeddings;
  const int64_t headroom = options.speculative_steps > 0 ? options.speculative_steps + 1 : 0;
  max_model_len_ = std::min(max_model_len_, capacity - headroom);
  check(max_model_len_ > 0, "the KV cache holds no tokens ({} pages)", options.kv_pages);
  status_ = compute_status();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Engine::submit(std::vector<int32_t> prompt, GenerationParams params, EventSink sink) {
  const io::ModelConfig& c = backend_->config();
  check(!prompt.empty(), "the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i)
    check(prompt[i] >= 0 && prompt[i] < c.vocab_size, "prompt token {} at index {} is outside the vocabulary [0, {})",
          prompt[i], i, c.vocab_size);
  check(params.max_tokens >= 1, "max_tokens must be at least 1, got {}", params.max_tokens);
  check(params.min_tokens >= 0 && params.min_tokens <= params.max_tokens,
        "min_tokens must be between 0 and max_tokens ({}), got {}", params.max_tokens, params.min_tokens);
  const int64_t total = int64_t(prompt.size()) + params.max_tokens;  // verify headroom is the engine's own
  check(total <= max_model_len_,
        "this model's maximum context length is {} tokens; the prompt has {} tokens and max_tokens is {} ({} in "
        "total)",
        max_model_len_, prompt.size(), params.max_tokens, total);
  validate(params.sampling);
  check(params.logprobs >= -1 && params.logprobs <= kMaxTopLogprobs, "logprobs must be between 0 and {}, got {}",
        kMaxTopLogprobs, params.logprobs);
  check(params.prompt_logprobs >= -1 && params.prompt_logprobs <= kMaxTopLogprobs,
        "prompt logprobs must be between 0 and {}, got {}", kMaxTopLogprobs, params.prompt_logprobs);
  for (const auto& s : params.stop_strings) check(!s.empty(), "stop strings must not be empty");

  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->prompt = std::move(prompt);
  r->params = std::move(params);
  if (!r->params.ignore_eos)
    for (int64_t eos : c.eos_token_ids) r->params.stop_token_ids.push_back(eos);
  r->sink = std::move(sink);
  r->arrival = Clock::now();
  r->rng.seed(r->params.seed ? *r->params.seed : std::random_device{}());
  r->decoder = decoder_ ? decoder_->start(r->params.skip_special_tokens) : nullptr;
  uint64_t id = r->id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.push_back(std::move(r));
  }
  wake_.notify_all();
  return id;
}

void Engine::abort(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

void Engine::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] {
    return incoming_.empty() && aborts_.empty() && !busy_ && status_.running == 0 && status_.waiting == 0;
  });
}

EngineStatus Engine::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

EngineStatus Engine::compute_status() const {
  EngineStatus s;
  s.running = int64_t(scheduler_.running().size());
  s.waiting = int64_t(scheduler_.waiting().size());
  s.slots_total = cache_.slots_total();
  s.slots_free = cache_.slots_free();
  s.pages_total = cache_.pages_total();
  s.pages_free = cache_.pages_free();
  s.page_tokens = cache_.layout().page_tokens;
  s.speculative_steps = options_.speculative_steps;
  return s;
}

void Engine::loop() {
  for (;;) {
    std::vector<std::unique_ptr<Request>> incoming;
    std::vector<uint64_t> aborts;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !aborts_.empty() || !scheduler_.running().empty() ||
               !scheduler_.waiting().empty();
      });
      if (stop_) return;
      incoming.swap(incoming_);
      aborts.swap(aborts_);
      busy_ = true;
    }
    for (auto& r : incoming) {
      metrics_.prompt_tokens += r->prompt.size();
      scheduler_.add(std::move(r));
    }
    for (uint64_t id : aborts)
      if (scheduler_.remove(id)) metrics_.requests_aborted++;
    step();
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
    status_ = compute_status();
    idle_.notify_all();
  }
}

void Engine::emit(Request& r, std::vector<int32_t> tokens, FinishReason finish, std::vector<TokenLogprobs> logprobs) {
  RequestEvent e;
  e.token_ids = std::move(tokens);
  e.logprobs = std::move(logprobs);
  e.prompt_logprobs = std::move(r.prompt_logprobs);  // gathered by the prefill; empty after the first event
  r.prompt_logprobs.clear();
  e.finish = finish;
  e.prompt_tokens = int64_t(r.prompt.size());
  e.completion_tokens = int64_t(r.output.size());
  e.spec_verify_steps = r.spec_verify_steps;
  e.spec_accepted_tokens = r.spec_accepted;
  // Hold back a tail that could be the start of a stop string, until the request finishes.
  size_t holdback = 0;
  for (const auto& s : r.params.stop_strings) holdback = std::max(holdback, s.size() - 1);
  size_t end = finish != FinishReason::None ? r.text.size()
                                            : utf8_boundary(r.text, r.text.size() > holdback ? r.text.size() - holdback : 0);
  if (end > r.streamed) {
    e.text = r.text.substr(r.streamed, end - r.streamed);
    r.streamed = end;
  }
  if (r.sink) r.sink(e);
}

void Engine::finish(uint64_t id) {
  std::unique_ptr<Request> r = scheduler_.remove(id);
  if (!r) return;
  const double e2e = seconds(Clock::now() - r->arrival);
  metrics_.e2e.observe(e2e);
}

void Engine::step() {
  scheduler_.admit();
  std::vector<BatchItem> all = scheduler_.next_batch();
  if (all.empty()) return;
  metrics_.steps++;
  const bool spec = options_.speculative_steps > 0;
  // With speculative decoding, decoding requests go through draft + verify (speculative_step); the normal
  // forward carries prefill chunks only.
  std::vector<BatchItem> batch;
  std::vector<Request*> decoding;
  for (const BatchItem& item : all) {
    if (spec && item.begin < 0)
      decoding.push_back(item.request);
    else
      batch.push_back(item);
  }
  std::vector<uint64_t> finished;
  std::vector<model::ForwardRequest> forward;
  // A backend that samples on the device takes each drawing request's settings and uniform with the forward
  // (drawn here from the request's stream as sample_token would) and returns tokens instead of logits; a batch
  // with a request whose rows are needed here (draws_on_host) brings the logits back and samples here (the same
  // draws, a slower step).
  const bool host_draws =
      std::any_of(batch.begin(), batch.end(), [](const BatchItem& b) { return draws_on_host(*b.request); });
  const bool device_sampling = backend_->samples_on_device() && !spec && !host_draws;
  for (const BatchItem& item : batch) {
    model::ForwardRequest f;
    Request& r = *item.request;
    const bool draws = item.begin < 0 || r.prefilled + item.count >= int64_t(r.prompt.size());
    if (device_sampling && draws) {
      const SamplingParams& sp = r.params.sampling;
      f.sample = true;
      f.sampling = {sp.temperature, sp.top_p, sp.top_k, sampling_uniform(sp, r.rng)};
    }
    f.seq = &r.seq;
    // The MTP drafter needs the target's streams at every prompt position; prompt logprobs, every prompt row.
    f.all_logits = spec || (item.begin >= 0 && r.params.prompt_logprobs >= 0);
    f.keep_hidden = spec;
    if (item.begin >= 0)
      f.tokens = std::span<const int32_t>(r.prompt.data() + item.begin, size_t(item.count));
    else
      f.tokens = std::span<const int32_t>(&*r.pending, 1);
    forward.push_back(f);
  }
  model::ForwardResult result;
  try {
    if (!forward.empty()) result = backend_->forward(forward, options_.numerics);
  } catch (const std::exception& e) {
    spdlog::error("forward failed for a batch of {} requests: {}", batch.size(), e.what());
    for (const BatchItem& item : batch) {
      Request& r = *item.request;
      RequestEvent ev;
      ev.finish = FinishReason::Error;
      ev.error = std::string("internal error: ") + e.what();
      ev.prompt_tokens = int64_t(r.prompt.size());
      if (r.sink) r.sink(ev);
      metrics_.requests_failed++;
      finish(r.id);
    }
    return;
  }

  const int64_t vocab = backend_->config().vocab_size;
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = *batch[i].request;
    r.seq.length += batch[i].count;
    if (batch[i].begin >= 0) r.prefilled += batch[i].count;
    r.pending.reset();
    if (spec) {
      // Keep the target's streams of every prompt position for the first MTP draft step.
      const int64_t rows = result.row_count[i], width = backend_->config().hc_mult * backend_->config().hidden_size;
      const float* h = result.hidden.f32() + result.first_row[i] * width;
      r.mtp_hidden.insert(r.mtp_hidden.end(), h, h + rows * width);
    }
    if (batch[i].begin >= 0 && r.params.prompt_logprobs >= 0) {  // row j predicts prompt position begin + j + 1
      const int64_t P = int64_t(r.prompt.size());
      for (int64_t j = 0; j < batch[i].count && batch[i].begin + j + 1 < P; ++j)
        r.prompt_logprobs.push_back(token_logprobs(result.logits.f32() + (result.first_row[i] + j) * vocab, vocab,
                                                   r.prompt[size_t(batch[i].begin + j + 1)], r.params.prompt_logprobs));
    }
    if (r.prefilling()) continue;  // more prompt to go: nothing to sample yet

    int32_t token;
    std::vector<TokenLogprobs> logprobs;
    if (forward[i].sample) {
      check(i < result.tokens.size() && result.tokens[i] >= 0, "internal: the backend did not sample a request");
      token = result.tokens[i];
    } else {
      float* logits = result.logits.f32() + (result.first_row[i] + result.row_count[i] - 1) * vocab;
      {
        StopTokenMask mask(r, logits, vocab);
        token = sample_token(logits, vocab, r.params.sampling, r.rng);
      }
      if (r.params.logprobs >= 0) logprobs.push_back(token_logprobs(logits, vocab, token, r.params.logprobs));
    }
    FinishReason reason = accept_token(r, token);
    emit(r, {r.output.back()}, reason, std::move(logprobs));
    if (reason != FinishReason::None) finished.push_back(r.id);
  }
  if (!decoding.empty()) speculative_step(decoding, finished);
  for (uint64_t id : finished) finish(id);
}

FinishReason Engine::accept_token(Request& r, int32_t token) {
  auto now = Clock::now();
  if (!r.first_token_time) {
    r.first_token_time = now;
    metrics_.ttft.observe(seconds(now - r.arrival));
  } else {
    metrics_.tpot.observe(seconds(now - r.last_token_time));
  }
  r.last_token_time = now;
  r.output.push_back(token);
  metrics_.generation_tokens++;

  FinishReason reason = FinishReason::None;
  bool stop_string = false;
  const auto& stops = r.params.stop_token_ids;
  const bool checks = int64_t(r.output.size()) >= r.params.min_tokens;  // no stop before min_tokens (vLLM's)
  const bool stop_token = checks && std::find(stops.begin(), stops.end(), token) != stops.end();
  if (r.decoder && !stop_token) r.text += r.decoder->push(token);
  if (stop_token) reason = FinishReason::Stop;
  if (reason == FinishReason::None && checks && !r.params.stop_strings.empty()) {
    size_t best = std::string::npos;
    for (const auto& s : r.params.stop_strings) {
      size_t from = r.streamed > s.size() ? r.streamed - s.size() : 0;
      size_t at = r.text.find(s, from);
      if (at != std::string::npos) best = std::min(best, at);
    }
    if (best != std::string::npos) {
      r.text.resize(best);  // the output ends before the stop string
      reason = FinishReason::Stop;
      stop_string = true;
    }
  }
  if (reason == FinishReason::None && int64_t(r.output.size()) >= r.params.max_tokens) reason = FinishReason::Length;
  if (reason != FinishReason::None && !stop_string && r.decoder) r.text += r.decoder->flush();
  if (reason == FinishReason::None) r.pending = token;
  if (reason != FinishReason::None)
    (reason == FinishReason::Stop ? metrics_.requests_finished_stop : metrics_.requests_finished_length)++;
  return reason;
}

void Engine::speculative_step(const std::vector<Request*>& requests, std::vector<uint64_t>& finished) {
  const io::ModelConfig& c = backend_->config();
  const int64_t k = options_.speculative_steps, vocab = c.vocab_size, width = c.hc_mult * c.hidden_size;
  const size_t n = requests.size();
  std::vector<std::vector<int32_t>> drafts(n);
  std::vector<std::vector<int32_t>> next(n);
  try {
    // 1. MTP over the positions whose target streams arrived since the last round (exact MTP KV), the last of
    //    which drafts the first token.
    std::vector<model::MtpRequest> extend(n);
    for (size_t i = 0; i < n; ++i) {
      Request& r = *requests[i];
      const int64_t L = r.seq.length;
      for (int64_t q = r.mtp_pos; q < L; ++q) next[i].push_back(r.token_at(q + 1));
      extend[i] = {&r.seq, r.mtp_pos, std::span<const int32_t>(next[i]), r.mtp_hidden.data()};
    }
    model::ForwardResult out = backend_->mtp_forward(extend, options_.numerics);
    std::vector<float> chain(n * size_t(width));
    std::vector<int32_t> chain_token(n);
    auto take = [&](const model::ForwardResult& o) {
      for (size_t i = 0; i < n; ++i) {
        const int64_t last = o.first_row[i] + o.row_count[i] - 1;
        const float* row = o.logits.f32() + last * vocab;
        chain_token[i] = int32_t(std::max_element(row, row + vocab) - row);
        drafts[i].push_back(chain_token[i]);
        std::copy_n(o.hidden.f32() + last * width, width, chain.begin() + int64_t(i) * width);
      }
    };
    take(out);
    for (size_t i = 0; i < n; ++i) {
      requests[i]->mtp_pos = requests[i]->seq.length;
      requests[i]->mtp_hidden.clear();
    }
    // 2. Chained draft steps: the MTP block's own output streams stand in for the target's.
    for (int64_t j = 1; j < k; ++j) {
      std::vector<model::MtpRequest> step(n);
      for (size_t i = 0; i < n; ++i)
        step[i] = {&requests[i]->seq, requests[i]->seq.length + j - 1, std::span<const int32_t>(&chain_token[i], 1),
                   chain.data() + int64_t(i) * width};
      take(backend_->mtp_forward(step, options_.numerics));
    }
    // 3. One target forward verifies [pending, d1..dk] of every request.
    std::vector<std::vector<int32_t>> verify(n);
    std::vector<model::ForwardRequest> forward(n);
    for (size_t i = 0; i < n; ++i) {
      verify[i].push_back(*requests[i]->pending);
      verify[i].insert(verify[i].end(), drafts[i].begin(), drafts[i].end());
      forward[i].seq = &requests[i]->seq;
      forward[i].tokens = std::span<const int32_t>(verify[i]);
      forward[i].all_logits = true;
      forward[i].keep_hidden = true;
    }
    model::ForwardResult target = backend_->forward(forward, options_.numerics);

    // 4. Accept, emit, commit.
    for (size_t i = 0; i < n; ++i) {
      Request& r = *requests[i];
      std::vector<int32_t> emitted;
      {
        std::deque<StopTokenMask> masks;  // row j draws output token |output| + j + 1
        for (int64_t j = 0; j <= int64_t(drafts[i].size()); ++j)
          masks.emplace_back(r, target.logits.f32() + (target.first_row[i] + j) * vocab, vocab, j);
        emitted = verify_drafts(target.logits.f32() + target.first_row[i] * vocab, vocab, drafts[i], r.params.sampling,
                                r.rng);
      }
      const uint64_t accepted = emitted.size() - 1;
      r.spec_verify_steps++;
      r.spec_accepted += accepted;
      metrics_.spec_verify_steps++;
      metrics_.spec_draft_tokens += uint64_t(k);
      metrics_.spec_accepted_tokens += accepted;
      metrics_.spec_accept_histogram[std::min<size_t>(accepted, 16)]++;
      // Positions L .. L + |emitted| - 1 now hold real tokens (the pending one and the accepted drafts);
      // everything the verify wrote past them is dead: the next round overwrites it.
      const int64_t L = r.seq.length, fed = int64_t(emitted.size());
      r.mtp_hidden.assign(target.hidden.f32() + target.first_row[i] * width,
                          target.hidden.f32() + (target.first_row[i] + fed) * width);
      r.seq.length = L + fed;
      r.pending.reset();
      std::vector<int32_t> sent;
      std::vector<TokenLogprobs> logprobs;
      FinishReason reason = FinishReason::None;
      for (int32_t token : emitted) {  // no token past a stop or max_tokens
        reason = accept_token(r, token);
        if (r.params.logprobs >= 0)  // the target's row of the position that drew this token
          logprobs.push_back(token_logprobs(target.logits.f32() + (target.first_row[i] + int64_t(sent.size())) * vocab,
                                            vocab, token, r.params.logprobs));
        sent.push_back(token);
        if (reason != FinishReason::None) break;
      }
      emit(r, sent, reason, std::move(logprobs));
      if (reason != FinishReason::None) finished.push_back(r.id);
    }
  } catch (const std::exception& e) {
    spdlog::error("speculative step failed for {} requests: {}", n, e.what());
    for (Request* r : requests) {
      RequestEvent ev;
      ev.finish = FinishReason::Error;
      ev.error = std::string("internal error: ") + e.what();
      ev.prompt_tokens = int64_t(r->prompt.size());
      if (r->sink) r->sink(ev);
      metrics_.requests_failed++;
      finished.push_back(r->id);
    }
  }
}

}  // namespace moeserve::engine
