#pragma once
// UTF-8 helpers for the tokenizer: validation at the boundary, lossy decoding that matches
// Rust's String::from_utf8_lossy (one U+FFFD per maximal invalid subpart, as HF `tokenizers` does),
// and detection of an incomplete trailing sequence so a streaming decoder can hold it back.
#include <cstddef>
#include <string>
#include <string_view>

namespace moeserve::server::utf8 {

// Length of the valid UTF-8 sequence starting at text[pos], or 0 if the bytes there are not one.
size_t sequence_length(std::string_view text, size_t pos);

// True if `text` is valid UTF-8; otherwise sets *error_offset to the first bad byte.
bool is_valid(std::string_view text, size_t* error_offset = nullptr);

// Appends `bytes` to `out`, replacing each maximal invalid subpart with U+FFFD.
void append_lossy(std::string_view bytes, std::string& out);

// Number of trailing bytes that form a valid but unfinished sequence (0..3): more bytes could
// still complete them, so a streaming decoder should wait instead of emitting U+FFFD.
size_t incomplete_tail(std::string_view bytes);

// Appends the UTF-8 encoding of code point `cp`.
void append_code_point(char32_t cp, std::string& out);

// Decodes the code point of a valid sequence of `length` bytes at `p`.
char32_t decode(const char* p, size_t length);

// Unicode White_Space (what Rust's char::is_whitespace tests; used for added-token lstrip/rstrip).
bool is_whitespace(char32_t cp);

}  // namespace moeserve::server::utf8
