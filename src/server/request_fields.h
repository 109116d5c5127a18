#pragma once
// The request fields of OpenAI's API and of vLLM's and SGLang's extensions that moeserve does not implement.
// Those that would change the answer (structured output, tools, logit bias, other samplers, logprobs, echo, ...)
// are refused with a 400 naming the field unless they are at their neutral value, so that no client gets a
// silently different answer. Fields nobody defines are listed for the server to log and otherwise ignored, as vLLM
// does (SGLang drops them silently; OpenAI refuses them): benchmark clients send engine-specific extras.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace moeserve::server {

// Throws a 400 ApiError for the first field that asks for something unimplemented.
void refuse_unimplemented_fields(const nlohmann::json& body, ApiKind kind);

// The top-level fields of `body` that neither the parser nor refuse_unimplemented_fields knows, sorted by name.
std::vector<std::string> unknown_fields(const nlohmann::json& body, ApiKind kind);

}  // namespace moeserve::server
