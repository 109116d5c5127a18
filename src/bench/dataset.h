#pragma once
// The random datasets of sglang.bench_serving, with exact input lengths.
// Lengths (SGLang's compute_random_lens): uniform integers on [max(⌊L·r⌋, 1), L], inputs drawn first,
// then outputs, from one generator seeded with --seed.
// - random-ids: prompt i is the token ids (offset_i + i + j) mod vocab, j < input_len_i, with offset_i
//   uniform on [0, vocab) (SGLang's synthetic ids), sent as a list of ints; prompt_len = input_len_i.
// - random: text. The input length first loses the special tokens the server's encode adds (BOS), as
//   SGLang's newer code does; then random ordinary token ids are decoded to text and re-encoded, and
//   the ids are trimmed or topped up until the text re-encodes to exactly that many tokens (a few
//   rounds; BPE merges across the joins are why one round is not enough). prompt_len is the length
//   the final text encodes to, so totals are exact even in the rare case it is not the target.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/request_client.h"

namespace moeserve::bench {

// What the datasets need from a tokenizer.
class TokenCodec {
 public:
  virtual ~TokenCodec() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;  // no special tokens added
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual size_t vocab_size() const = 0;
  virtual size_t num_special_tokens_to_add() const = 0;  // tokens the server's encode adds (BOS)
  virtual std::vector<int32_t> ordinary_ids() const = 0;  // ids that are not special/added tokens
};

std::vector<int> random_lengths(int full_len, double range_ratio, int count, std::mt19937_64& rng);

struct DatasetSpec {
  int num_prompts = 0;
  int input_len = 0;
  int output_len = 0;
  double range_ratio = 0.0;
};

std::vector<Prompt> random_ids_dataset(const DatasetSpec& spec, size_t vocab_size, std::mt19937_64& rng);

struct TextDatasetStats {
  int inexact = 0;  // prompts whose text could not be made to re-encode to the target length
};
std::vector<Prompt> random_text_dataset(const DatasetSpec& spec, const TokenCodec& codec, std::mt19937_64& rng,
                                        TextDatasetStats* stats = nullptr);

}  // namespace moeserve::bench
