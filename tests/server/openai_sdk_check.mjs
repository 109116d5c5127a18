// Drives a running moeserve server with the official OpenAI Node SDK. Usage: node openai_sdk_check.mjs BASE_URL
// Exits non-zero (with the failing assertion) on any mismatch.
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const model = "demo";
const greedy = { temperature: 0, ignore_eos: true };

// Chat, not streamed.
const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Where did they go?" }], max_tokens: 10, ...greedy,
});
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(typeof chat.choices[0].message.content, "string");
assert.ok(chat.choices[0].message.content.length > 0, "empty chat content");
// The built-in model was trained on English (the Brown Corpus): its words are English letters.
const letters = (chat.choices[0].message.content.match(/[A-Za-z ,.;:'"!?()-]/g) || []).length;
assert.ok(letters / chat.choices[0].message.content.length > 0.9, `not English-like: '${chat.choices[0].message.content}'`);
assert.equal(chat.choices[0].finish_reason, "length");
assert.equal(chat.usage.completion_tokens, 10);
assert.ok(chat.usage.prompt_tokens > 0);
assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + chat.usage.completion_tokens);

// Two choices of a seeded sample: the SDK sees both, in order, with the usage of both.
const two = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Where did they go?" }], max_tokens: 4, n: 2, temperature: 0.9,
  seed: 3, ignore_eos: true,
});
assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
assert.ok(two.choices.every((c) => c.message.role === "assistant" && c.finish_reason === "length"));
assert.equal(two.usage.completion_tokens, 8);

// Logprobs as the SDK types them: one content entry per completion token, each with its alternatives.
const withLogprobs = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Where did they go?" }], max_tokens: 5, logprobs: true, top_logprobs: 2,
  ...greedy,
});
const content = withLogprobs.choices[0].logprobs.content;
assert.equal(content.length, 5);
assert.ok(content.every((t) => t.logprob <= 0 && t.top_logprobs.length === 2 && t.top_logprobs[0].token === t.token));
assert.equal(Buffer.from(content.flatMap((t) => t.bytes)).toString("utf8"), withLogprobs.choices[0].message.content);

// The same chat, streamed: the deltas add up to the same text.
const stream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Where did they go?" }], max_tokens: 10, stream: true,
  stream_options: { include_usage: true }, ...greedy,
});
let streamed = "", finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    streamed += choice.delta?.content ?? "";
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
assert.ok(chunks >= 3, `only ${chunks} chunks`);
assert.equal(streamed, chat.choices[0].message.content);
assert.equal(finish, "length");
assert.deepEqual(usage, chat.usage);

// A completion.
const completion = await client.completions.create({ model, prompt: "The house was", max_tokens: 12, ...greedy });
assert.equal(completion.object, "text_completion");
assert.equal(completion.choices[0].finish_reason, "length");
assert.equal(completion.usage.completion_tokens, 12);
const full = completion.choices[0].text;
assert.ok(full.length >= 4, `short completion '${full}'`);

// A stop string ends the output before it.
const stop = full.slice(2, 4);
const stopped = await client.completions.create({ model, prompt: "The house was", max_tokens: 12, stop: [stop], ...greedy });
assert.equal(stopped.choices[0].text, full.slice(0, full.indexOf(stop)));
assert.equal(stopped.choices[0].finish_reason, "stop");
assert.ok(stopped.usage.completion_tokens <= 12);

// Errors come back as the SDK's typed errors.
await assert.rejects(
  client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }),
  (e) => e.status === 404 && /does not exist/.test(e.message));
await assert.rejects(
  client.chat.completions.create({ model, messages: [] }),
  (e) => e.status === 400 && /must not be empty/.test(e.message));

// One model retrieved by name.
assert.equal((await client.models.retrieve(model)).id, model);

// Models list.
const models = await client.models.list();
assert.equal(models.data[0].id, model);
console.log("openai sdk checks passed");
