#include "bench/dataset.h"

#include <algorithm>

#include "core/error.h"

namespace moeserve::bench {
namespace {
constexpr int kMaxRounds = 10;

std::vector<int32_t> sample_ids(const std::vector<int32_t>& pool, size_t count, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::vector<int32_t> ids(count);
  for (auto& id : ids) id = pool[pick(rng)];
  return ids;
}
}  // namespace

std::vector<int> random_lengths(int full_len, double range_ratio, int count, std::mt19937_64& rng) {
  check(full_len >= 1, "length must be at least 1, got {}", full_len);
  check(range_ratio >= 0.0 && range_ratio <= 1.0, "range ratio must be in [0, 1], got {}", range_ratio);
  const int low = std::max(static_cast<int>(full_len * range_ratio), 1);
  std::uniform_int_distribution<int> length(low, full_len);
  std::vector<int> lengths(static_cast<size_t>(count));
  for (auto& l : lengths) l = length(rng);
  return lengths;
}

std::vector<Prompt> random_ids_dataset(const DatasetSpec& spec, size_t vocab_size, std::mt19937_64& rng) {
  check(vocab_size >= 1, "random-ids needs a vocabulary size of at least 1");
  const auto input_lens = random_lengths(spec.input_len, spec.range_ratio, spec.num_prompts, rng);
  const auto output_lens = random_lengths(spec.output_len, spec.range_ratio, spec.num_prompts, rng);
  std::uniform_int_distribution<size_t> offset(0, vocab_size - 1);
  std::vector<Prompt> prompts(static_cast<size_t>(spec.num_prompts));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t base = offset(rng);
    Prompt& p = prompts[i];
    p.as_ids = true;
    p.ids.resize(static_cast<size_t>(input_lens[i]));
    for (size_t j = 0; j < p.ids.size(); ++j) p.ids[j] = static_cast<int32_t>((base + i + j) % vocab_size);
    p.prompt_len = input_lens[i];
    p.output_len = output_lens[i];
  }
  return prompts;
}

std::vector<Prompt> random_text_dataset(const DatasetSpec& spec, const TokenCodec& codec, std::mt19937_64& rng,
                                        TextDatasetStats* stats) {
  auto input_lens = random_lengths(spec.input_len, spec.range_ratio, spec.num_prompts, rng);
  const auto output_lens = random_lengths(spec.output_len, spec.range_ratio, spec.num_prompts, rng);
  const int specials = static_cast<int>(codec.num_special_tokens_to_add());
  for (auto& l : input_lens) l = std::max(0, l - specials);
  const std::vector<int32_t> pool = codec.ordinary_ids();
  check(!pool.empty(), "the tokenizer has no ordinary tokens to build random prompts from");
  std::vector<Prompt> prompts(static_cast<size_t>(spec.num_prompts));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t target = static_cast<size_t>(input_lens[i]);
    std::vector<int32_t> ids = sample_ids(pool, target, rng);
    std::string text;
    std::vector<int32_t> encoded;
    for (int round = 0; round < kMaxRounds; ++round) {
      text = codec.decode(ids);
      encoded = codec.encode(text);
      if (encoded.size() == target) break;
      // Keep what the text encodes to, cut to the target or topped up with fresh random ids.
      ids.assign(encoded.begin(), encoded.begin() + static_cast<std::ptrdiff_t>(std::min(encoded.size(), target)));
      if (ids.size() < target) {
        const auto extra = sample_ids(pool, target - ids.size(), rng);
        ids.insert(ids.end(), extra.begin(), extra.end());
      }
    }
    if (encoded.size() != target && stats) ++stats->inexact;
    Prompt& p = prompts[i];
    p.text = std::move(text);
    p.prompt_len = static_cast<int>(encoded.size());
    p.output_len = output_lens[i];
  }
  return prompts;
}

}  // namespace moeserve::bench
