#pragma once
// The formats a plan is made for: how weights are stored (the CLI's --weights), how KV entries are
// stored (a profile's kv_format) and how the C128 (HCA) compressor keeps its per-request state (--c128).
#include <string>

namespace moeserve::planner {

// bf16: every weight BF16. fp8: every linear FP8 e4m3 with one e8m0 scale per 128x128 block, routed
// experts too. mxfp4-fp8: dense linears as in fp8, routed experts MXFP4 (e2m1 packed two per byte plus one
// e8m0 scale per 32 input elements), computed with FP8 activations (the official FP4 checkpoint).
enum class WeightFormat { BF16, FP8, MXFP4_FP8 };
// fp8: FlashMLA's "MODEL1" entry (nope dims e4m3, rope dims bf16, one e8m0 scale per 64 nope dims, padded to
// 8 bytes) and FP8 indexer keys (e4m3 plus one fp32 scale per 128 dims). bf16: plain BF16. f32: plain fp32
// (the CPU reference engine).
enum class KvFormat { FP8, BF16, F32 };
// offline: keep every raw (kv, score) row of the current block. online: a running (max, sum, kv) aggregate.
enum class C128Mode { Offline, Online };

const char* weight_format_name(WeightFormat format);
const char* kv_format_name(KvFormat format);
const char* c128_mode_name(C128Mode mode);
// Parse the lower-case names above; errors name `what` (the flag or field) and list the accepted values.
WeightFormat parse_weight_format(const std::string& name, const std::string& what);
KvFormat parse_kv_format(const std::string& name, const std::string& what);
C128Mode parse_c128_mode(const std::string& name, const std::string& what);

}  // namespace moeserve::planner
