#pragma once
// GPT-2 byte-level alphabet: every byte maps to a printable code point, so a BPE vocabulary of
// strings can cover arbitrary bytes. Printable Latin-1 bytes map to themselves; the other 68 bytes
// map to U+0100.. in byte order (so ' ' becomes 'Ġ' and '\n' becomes 'Ċ').
#include <string>
#include <string_view>

namespace moeserve::server::byte_level {

// The UTF-8 encoding of the code point that stands for `byte`.
std::string_view encode_byte(unsigned char byte);

// Appends the byte-level form of `raw` to `out`.
void encode(std::string_view raw, std::string& out);

// Appends the bytes a byte-level token stands for. Returns false (appending nothing) if the token
// holds a character outside the alphabet; HF then keeps the token's own UTF-8 bytes.
bool decode(std::string_view token, std::string& out);

}  // namespace moeserve::server::byte_level
