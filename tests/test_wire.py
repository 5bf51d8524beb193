"""Every stream and response shape of the OpenAI-compatible servers bantam talks to (issue 4).

Each row of SHAPES is one shape a server family sends. It is replayed through the fake server
in a two-turn REPL session (stdin piped: "go", then "next"), and the test checks
- what bantam printed for the first turn (exactly),
- the assistant message it stored (the autosave file), with no null fields and no reasoning
  folded into the content,
- what it sent next: one tool message per call with the call's id (and the request after the
  tools holding the stored message and those tool messages), a retry identical to the first
  try, and the second turn's request carrying the stored message unchanged.

The README's server table mirrors this one:

| Server family | Shape | Case in tests/test_wire.py |
| --- | --- | --- |
| OpenAI | tool-call id and name only in the first fragment, arguments split inside `\\"` and `\\u00e9` escapes | `args_split_in_escapes` |
| OpenAI | two tool calls interleaved by `index` | `two_calls_interleaved` |
| LiteLLM proxy, Fireworks | id and type repeated in every fragment (never glued) | `id_repeated_every_fragment` |
| DeepSeek, Qwen, LM Studio | id, type and name repeated in every fragment (name set once) | `id_and_name_repeated` |
| vLLM | two fragments with the same index in one chunk | `same_index_twice_in_one_chunk` |
| Ollama, local servers | a complete call in one chunk | `whole_call_in_one_chunk` |
| local servers | two complete calls in one chunk, without `index` | `no_index_two_calls_one_chunk` |
| local servers | one call in fragments, without `index` | `no_index_fragments` |
| local servers | two calls in separate chunks, without `index` | `no_index_separate_chunks` |
| local servers | tool calls with `finish_reason: "stop"` | `finish_reason_stop_with_calls` |
| OpenAI | `content: null` in every chunk next to tool calls | `content_null_streamed` |
| OpenAI | `content: null` next to tool calls, not streamed | `content_null_not_streamed` |
| local servers | empty-string and missing call ids (made up, unique, used by the tool messages) | `empty_and_missing_ids` |
| local servers | missing call ids, not streamed | `missing_ids_not_streamed` |
| DeepSeek, vLLM | `reasoning_content` streamed | `reasoning_content_streamed` |
| DeepSeek (thinking mode) | `reasoning_content` with a tool call: kept on the message | `reasoning_content_with_tool_call` |
| OpenRouter, Ollama | `reasoning` streamed | `reasoning_streamed` |
| DeepSeek, vLLM | `reasoning_content`, not streamed | `reasoning_content_not_streamed` |
| OpenRouter, Ollama | `reasoning`, not streamed | `reasoning_not_streamed` |
| OpenRouter | `reasoning_details` streamed in fragments of one block: stored as one block | `reasoning_details_streamed` |
| OpenRouter | `reasoning_details`, not streamed: stored as sent | `reasoning_details_not_streamed` |
| any (SSE) | `data:` without the space | `data_without_space` |
| any (SSE) | CRLF line ends | `crlf_line_ends` |
| OpenRouter | `: OPENROUTER PROCESSING` comments and blank keep-alives | `comments_and_keepalives` |
| any (SSE) | `event:`, `id:` and `retry:` lines | `event_id_retry_lines` |
| any (SSE) | one event in several `data:` lines | `multiline_data_event` |
| any (chunked HTTP) | body cut every byte, inside UTF-8 characters | `split_every_byte` |
| any (chunked HTTP) | body cut every 3 bytes | `split_every_3_bytes` |
| any | a 3 MB line (one delta) | `multi_megabyte_line` |
| Azure OpenAI | prompt-filter chunk with `choices: []` first | `azure_prompt_filter_chunk` |
| OpenAI (`include_usage`) | usage-only chunk with `choices: []` last | `usage_only_last_chunk` |
| OpenAI, vLLM | `{"error": ...}` inside the stream: reported, retried | `error_in_stream_retried` |
| OpenRouter | mid-stream `error` next to `finish_reason: "error"`: reported, retried | `openrouter_mid_stream_error` |
| local servers, proxies | `stream: true` ignored, plain JSON answer | `stream_ignored_plain_json` |
| Mistral (Magistral) | `content` as a list of thinking and text parts, streamed | `mistral_content_parts_streamed` |
| Mistral (Magistral) | content parts, not streamed | `mistral_content_parts_not_streamed` |
| Gemini 3 (OpenAI-compatible) | a signed tool call (`extra_content.google.thought_signature`) in one fragment without `index`, `finish_reason: "stop"`: the signature goes back on that call | `gemini_signature_streamed` |
| Gemini 3 (OpenAI-compatible) | a signed and an unsigned tool call, not streamed | `gemini_signature_not_streamed` |
| Gemini 3 through Vertex gateways | `extra_content.vertex.thought_signature` | `vertex_signature_streamed` |
| Gemini 3 (OpenAI-compatible) | a signature on a text reply: kept on the message | `gemini_signed_text` |
| any | `finish_reason: "length"`: the cut is said in one line | `cut_by_length` |
| Azure OpenAI, OpenAI | `finish_reason: "content_filter"`: said in one line | `cut_by_content_filter` |
| gateways slicing UTF-16 | an emoji as two surrogate halves in two chunks: joined | `surrogate_halves_split` |
| gateways slicing UTF-16 | a lone surrogate half: replaced by U+FFFD, the session still saved | `lone_surrogate` |
| any | non-streamed body with `choices: []`: reported, retried | `no_choices_not_streamed` |
| Ollama (0.20 `/v1`), LiteLLM's `ollama_chat` | parallel calls each whole in its own chunk, all at `index` 0, each with its own id: separate calls | `ollama_calls_all_at_index_0` |
| llama.cpp (`llama-server`) | text, then `{"error": {"code": 500, ...}}` and no `[DONE]`: retried | `llama_server_error_after_text` |
| any | reasoning in three chunks, the last one ending in what could begin the API key, then the answer: shown in the order sent | `reasoning_order_kept` |
| LiteLLM proxy | usage in a last chunk whose `choices` is not empty | `litellm_usage_beside_choices` |
| relays, proxies | `data: null` between the chunks: skipped | `data_null_event` |
| Moonshot Kimi | usage inside `choices[0]` of the last chunk | `moonshot_usage_in_choice` |
| xAI Grok | usage on the finish chunk, then a chunk with `choices: []` and none | `xai_usage_before_last_chunk` |
| DeepSeek through Baidu Qianfan | every fragment holds all the arguments so far: the last one wins | `cumulative_arguments` |
| proxies (OpenCodex, elizaOS cloud) | arguments in fragments, then all of them again with id and name | `arguments_resent_whole` |
| Qwen (DashScope) | continuation fragments with `"id": ""` and `type` | `dashscope_empty_id_fragments` |
| OpenAI-compatible servers | first fragment with id and arguments, the name in a later one | `name_in_later_fragment` |
| llama.cpp (`llama-server`) | `arguments` as a JSON object, not a string: stored as a string | `object_arguments_not_streamed` |

Failing for good (every retry fails) is checked by the tests after the table.

The last eight rows come from other clients' bug reports (2025-2026): `data_null_event`
https://github.com/NousResearch/hermes-agent/pull/89575; `moonshot_usage_in_choice`
https://github.com/earendil-works/pi/issues/2017, https://github.com/AstrBotDevs/AstrBot/issues/6614;
`xai_usage_before_last_chunk` https://github.com/BerriAI/litellm/issues/17136;
`cumulative_arguments` https://github.com/NousResearch/hermes-agent/pull/35718;
`arguments_resent_whole` https://github.com/lidge-jun/opencodex/issues/361,
https://github.com/elizaOS/eliza/pull/16973; `dashscope_empty_id_fragments`
https://github.com/ThinkInAIXYZ/deepchat/issues/355; `name_in_later_fragment`
https://github.com/anomalyco/opencode/issues/24137; `object_arguments_not_streamed`
https://github.com/ggml-org/llama.cpp/issues/20198.
"""

import collections
import json
import os
import unittest

from tests.support import (
    CREATED, FakeServer, Workspace, chunk, completion, json_reply, run_bantam, sse, text_stream,
    usage)

FIRST, SECOND = "go", "next"
TOOLS_DONE = "TOOLS-DONE"      # the answer after the tool results
NEXT_OK = "NEXT-OK"            # the answer to the second turn
MADE_UP = object()             # expected id: bantam must make one up
OMIT = object()                # a key left out of a fragment

Case = collections.namedtuple("Case", "name family shape script printed stored results cfg stderr")


def case(name, family, shape, script, printed, stored, results=(), cfg=None, stderr=()):
    """One row of the table: script is the first model call's responses (retries included)."""
    return Case(name, family, shape, list(script), printed, stored, list(results), cfg or {},
                list(stderr))


# ---------------------------------------------------------------- builders for the table

def frag(index=OMIT, id=OMIT, name=OMIT, args=OMIT):
    """A streamed tool-call fragment with only the given keys (type comes with the name)."""
    f = collections.OrderedDict()
    if index is not OMIT:
        f["index"] = index
    if id is not OMIT:
        f["id"] = id
    function = {}
    if name is not OMIT:
        f["type"] = "function"
        function["name"] = name
    if args is not OMIT:
        function["arguments"] = args
    f["function"] = function
    return dict(f)


def calls(*fragments, finish=None, content=OMIT):
    """A chunk whose delta carries the given tool-call fragments."""
    delta = {"tool_calls": list(fragments)}
    if content is not OMIT:
        delta["content"] = content
    return chunk(delta, finish_reason=finish)


def stream(*events, **kw):
    """An OpenAI-style tool-call stream: role chunk, events, finish "tool_calls" (unless given)."""
    finish = kw.pop("finish", "tool_calls")
    head = [chunk({"role": "assistant", "content": None})]
    tail = [chunk({}, finish_reason=finish)] if finish else []
    return sse(head + list(events) + tail, **kw)


def call(call_id, args, name="shell_exec"):
    """A tool call as stored."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def with_calls(*stored_calls, **extra):
    """The stored assistant message for a reply that is only tool calls."""
    message = {"role": "assistant", "content": "", "tool_calls": list(stored_calls)}
    message.update(extra)
    return message


def said(text, **extra):
    """The stored assistant message for a text reply."""
    message = {"role": "assistant", "content": text}
    message.update(extra)
    return message


def echo(word):
    """The JSON arguments of shell_exec running `echo word`."""
    return json.dumps({"command": "echo " + word})


def traced(args, output):
    """What bantam prints for one shell_exec call whose command prints output."""
    return "[tool call: shell_exec(%s)]\n[tool result: shell_exec]\n%s\n" % (args, result(output))


def result(output):
    """The tool message content for a command that printed output and exited 0."""
    return "%s\n\n\nexit: 0" % output


def reasoning_block(text):
    """How bantam prints reasoning."""
    return "--- reasoning start ---\n%s\n--- reasoning end ---\n" % text


def raw_event(obj, before="", eol="\n"):
    """One SSE event written by hand: extra field lines before the data line."""
    return before + "data: " + json.dumps(obj, ensure_ascii=False) + eol + eol


def not_streamed(message, finish="stop", usage_=None):
    """A chat.completion body with this message."""
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": CREATED,
            "model": "test-model", "choices": [{"index": 0, "message": message,
                                                "finish_reason": finish}]}
    if usage_:
        body["usage"] = usage_
    return body


ESCAPED = '{"command": "echo \\"caf\\u00e9\\""}'   # echo "café", with JSON escapes
UTF8 = "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c"   # héllo wörld ✓ 日本
BIG = ("0123456789abcdef" * 200000)[:3000000]           # 3 MB in one delta
SIGNED = [
    {"type": "reasoning.text", "text": "Let", "format": "anthropic-claude-v1", "index": 0},
    {"type": "reasoning.text", "text": " me check.", "format": "anthropic-claude-v1", "index": 0},
    {"type": "reasoning.text", "signature": "sig-Et8BCmUIDxgC", "format": "anthropic-claude-v1", "index": 0},
]
DETAILS = [
    {"type": "reasoning.summary", "summary": "Checked the sum.", "format": "openai-responses-v1", "index": 0},
    {"type": "reasoning.encrypted", "data": "gAAAAB3nc", "id": "rs_1", "format": "openai-responses-v1", "index": 1},
]
STREAM_ERROR = {"error": {"message": "The server had an error while processing your request. Sorry about that!",
                          "type": "server_error"}}
LLAMA_ERROR = {"error": {"code": 500, "message": "The model produced output that does not match the expected "
                                                "peg-native format", "type": "server_error"}}   # llama-server, 2026
LITELLM_USAGE = {"id": "chatcmpl-H7R5", "created": CREATED, "model": "test-model", "object": "chat.completion.chunk",
                 "system_fingerprint": "b0-unknown", "choices": [{"index": 0, "delta": {}}],
                 "usage": {"completion_tokens": 3, "prompt_tokens": 12, "total_tokens": 15,
                           "completion_tokens_details": {"reasoning_tokens": 0, "text_tokens": 3},
                           "prompt_tokens_details": {"cached_tokens": 5}}}   # the proxy's, in front of llama-server
MOONSHOT_USAGE = {"prompt_tokens": 1336, "completion_tokens": 31, "total_tokens": 1367, "cached_tokens": 1280,
                  "prompt_tokens_details": {"cached_tokens": 1280}}   # Kimi's, inside the choice
OPENROUTER_ERROR = {"id": "gen-1", "object": "chat.completion.chunk", "created": CREATED, "model": "test-model",
                    "provider": "SomeProvider",
                    "error": {"code": "server_error", "message": "Provider disconnected unexpectedly"},
                    "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}


SHAPES = [
    # ------------------------------------------------------------ tool-call deltas
    case("args_split_in_escapes", "OpenAI",
         "tool-call id and name only in the first fragment, arguments split inside escapes",
         [stream(calls(frag(0, "call_a1", "shell_exec", "")),
                 *[calls(frag(0, args=piece)) for piece in
                   ['{"command": "echo \\', '"caf\\u0', '0e9\\', '""}']])],
         traced(ESCAPED, "caf\u00e9") + TOOLS_DONE + "\n",
         with_calls(call("call_a1", ESCAPED)), [result("caf\u00e9")]),
    case("two_calls_interleaved", "OpenAI", "two tool calls interleaved by index",
         [stream(calls(frag(0, "call_1", "shell_exec", "")), calls(frag(1, "call_2", "shell_exec", "")),
                 calls(frag(0, args='{"comm')), calls(frag(1, args='{"command": "echo t')),
                 calls(frag(0, args='and": "echo one"}')), calls(frag(1, args='wo"}')))],
         traced(echo("one"), "one") + traced(echo("two"), "two") + TOOLS_DONE + "\n",
         with_calls(call("call_1", echo("one")), call("call_2", echo("two"))),
         [result("one"), result("two")]),
    case("id_repeated_every_fragment", "LiteLLM proxy, Fireworks", "id and type in every fragment",
         [stream(calls(frag(0, "call_l", "shell_exec", "")),
                 *[calls(dict(frag(0, "call_l", args=piece), type="function")) for piece in
                   ['{"command"', ': "echo ', 'lite"}']])],
         traced(echo("lite"), "lite") + TOOLS_DONE + "\n",
         with_calls(call("call_l", echo("lite"))), [result("lite")]),
    case("id_and_name_repeated", "DeepSeek, Qwen, LM Studio", "id, type and name in every fragment",
         [stream(*[calls(frag(0, "call_r", "shell_exec", piece)) for piece in
                   ['{"command"', ': "echo ', 'rep"}']])],
         traced(echo("rep"), "rep") + TOOLS_DONE + "\n",
         with_calls(call("call_r", echo("rep"))), [result("rep")]),
    case("same_index_twice_in_one_chunk", "vLLM", "two fragments with the same index in one chunk",
         [stream(calls(frag(0, "call_v", "shell_exec", '{"command": '), frag(0, args='"echo vllm"}')))],
         traced(echo("vllm"), "vllm") + TOOLS_DONE + "\n",
         with_calls(call("call_v", echo("vllm"))), [result("vllm")]),
    case("whole_call_in_one_chunk", "Ollama, local servers", "a complete call in one chunk",
         [stream(calls(frag(0, "call_w", "shell_exec", echo("whole"))))],
         traced(echo("whole"), "whole") + TOOLS_DONE + "\n",
         with_calls(call("call_w", echo("whole"))), [result("whole")]),
    case("no_index_two_calls_one_chunk", "local servers", "two complete calls in one chunk, no index",
         [stream(calls(frag(id="call_p", name="shell_exec", args=echo("one")),
                       frag(id="call_q", name="shell_exec", args=echo("two"))))],
         traced(echo("one"), "one") + traced(echo("two"), "two") + TOOLS_DONE + "\n",
         with_calls(call("call_p", echo("one")), call("call_q", echo("two"))),
         [result("one"), result("two")]),
    case("no_index_fragments", "local servers", "one call in fragments, no index",
         [stream(calls(frag(id="call_f", name="shell_exec", args="")),
                 calls(frag(args='{"command": ')), calls(frag(args='"echo frag"}')))],
         traced(echo("frag"), "frag") + TOOLS_DONE + "\n",
         with_calls(call("call_f", echo("frag"))), [result("frag")]),
    case("no_index_separate_chunks", "local servers", "two calls in separate chunks, no index",
         [stream(calls(frag(id="call_s1", name="shell_exec", args=echo("one"))),
                 calls(frag(id="call_s2", name="shell_exec", args=echo("two"))))],
         traced(echo("one"), "one") + traced(echo("two"), "two") + TOOLS_DONE + "\n",
         with_calls(call("call_s1", echo("one")), call("call_s2", echo("two"))),
         [result("one"), result("two")]),
    case("finish_reason_stop_with_calls", "local servers", 'tool calls with finish_reason "stop"',
         [stream(calls(frag(0, "call_st", "shell_exec", echo("stop"))), finish="stop")],
         traced(echo("stop"), "stop") + TOOLS_DONE + "\n",
         with_calls(call("call_st", echo("stop"))), [result("stop")]),
    case("content_null_streamed", "OpenAI", "content null in every chunk next to tool calls",
         [stream(calls(frag(0, "call_n", "shell_exec", ""), content=None),
                 calls(frag(0, args=echo("null")), content=None))],
         traced(echo("null"), "null") + TOOLS_DONE + "\n",
         with_calls(call("call_n", echo("null"))), [result("null")]),
    case("content_null_not_streamed", "OpenAI", "content null next to tool calls, not streamed",
         [completion(None, tool_calls=[("call_n", "shell_exec", echo("null"))])],
         traced(echo("null"), "null") + TOOLS_DONE + "\n",
         with_calls(call("call_n", echo("null"))), [result("null")], cfg={"stream": False}),
    case("empty_and_missing_ids", "local servers", "empty-string and missing call ids",
         [stream(calls(frag(0, "", "shell_exec", echo("one"))),
                 calls(frag(1, name="shell_exec", args=echo("two"))))],
         traced(echo("one"), "one") + traced(echo("two"), "two") + TOOLS_DONE + "\n",
         with_calls(call(MADE_UP, echo("one")), call(MADE_UP, echo("two"))),
         [result("one"), result("two")]),
    case("missing_ids_not_streamed", "local servers", "missing call ids, not streamed",
         [not_streamed({"role": "assistant", "content": None, "tool_calls": [
             {"type": "function", "function": {"name": "shell_exec", "arguments": echo("one")}},
             {"type": "function", "function": {"name": "shell_exec", "arguments": echo("two")}}]},
             finish="tool_calls")],
         traced(echo("one"), "one") + traced(echo("two"), "two") + TOOLS_DONE + "\n",
         with_calls(call(MADE_UP, echo("one")), call(MADE_UP, echo("two"))),
         [result("one"), result("two")], cfg={"stream": False}),
    # ------------------------------------------------------------ reasoning
    case("reasoning_content_streamed", "DeepSeek, vLLM", "reasoning_content streamed",
         [text_stream("The answer is 4.", reasoning="2 plus 2 makes 4.")],
         reasoning_block("2 plus 2 makes 4.") + "The answer is 4.\n", said("The answer is 4.")),
    case("reasoning_content_with_tool_call", "DeepSeek (thinking mode)",
         "reasoning_content next to a tool call, kept on the message",
         [stream(chunk({"reasoning_content": "I should "}), chunk({"reasoning_content": "run echo."}),
                 calls(frag(0, "call_d", "shell_exec", echo("think"))))],
         reasoning_block("I should run echo.") + traced(echo("think"), "think") + TOOLS_DONE + "\n",
         with_calls(call("call_d", echo("think")), reasoning_content="I should run echo."),
         [result("think")]),
    case("reasoning_streamed", "OpenRouter, Ollama", "reasoning streamed",
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"reasoning": "Two and "}),
               chunk({"reasoning": "two."}), chunk({"content": "Four."}), chunk({}, "stop")])],
         reasoning_block("Two and two.") + "Four.\n", said("Four.")),
    case("reasoning_content_not_streamed", "DeepSeek, vLLM", "reasoning_content, not streamed",
         [completion("Four.", reasoning="Two and two.")],
         reasoning_block("Two and two.") + "Four.\n", said("Four."), cfg={"stream": False}),
    case("reasoning_not_streamed", "OpenRouter, Ollama", "reasoning, not streamed",
         [not_streamed({"role": "assistant", "content": "Four.", "reasoning": "Two and two."})],
         reasoning_block("Two and two.") + "Four.\n", said("Four."), cfg={"stream": False}),
    case("reasoning_details_streamed", "OpenRouter",
         "reasoning_details fragments of one signed block, with a tool call",
         [stream(chunk({"reasoning": "Let", "reasoning_details": [SIGNED[0]]}),
                 chunk({"reasoning": " me check.", "reasoning_details": [SIGNED[1]]}),
                 chunk({"reasoning_details": [SIGNED[2]]}),
                 calls(frag(0, "call_or", "shell_exec", echo("signed"))))],
         reasoning_block("Let me check.") + traced(echo("signed"), "signed") + TOOLS_DONE + "\n",
         with_calls(call("call_or", echo("signed")), reasoning_details=[
             {"type": "reasoning.text", "text": "Let me check.", "signature": "sig-Et8BCmUIDxgC",
              "format": "anthropic-claude-v1", "index": 0}]),
         [result("signed")]),
    case("reasoning_details_not_streamed", "OpenRouter", "reasoning_details, not streamed",
         [not_streamed({"role": "assistant", "content": "Four.", "reasoning": "Checked the sum.",
                        "reasoning_details": DETAILS})],
         reasoning_block("Checked the sum.") + "Four.\n", said("Four.", reasoning_details=DETAILS),
         cfg={"stream": False}),
    # ------------------------------------------------------------ SSE framing
    case("data_without_space", "any (SSE)", "data: without the space",
         [text_stream("No space here.", space=False)], "No space here.\n", said("No space here.")),
    case("crlf_line_ends", "any (SSE)", "CRLF line ends",
         [text_stream("Windows lines.", crlf=True)], "Windows lines.\n", said("Windows lines.")),
    case("comments_and_keepalives", "OpenRouter", "comment lines and blank keep-alives",
         [sse([": OPENROUTER PROCESSING\n\n", "\n\n", chunk({"role": "assistant", "content": ""}),
               ": OPENROUTER PROCESSING\n\n", "\n", chunk({"content": "Kept "}), "\n\n\n",
               chunk({"content": "alive."}), ":\n\n", chunk({}, "stop")])],
         "Kept alive.\n", said("Kept alive.")),
    case("event_id_retry_lines", "any (SSE)", "event:, id: and retry: lines",
         [sse(["retry: 3000\n\n",
               raw_event(chunk({"role": "assistant", "content": ""}), "event: message\nid: 1\n"),
               raw_event(chunk({"content": "With "}), "event: message\n"),
               raw_event(chunk({"content": "events."}), "id: 3\nevent: message\n"),
               raw_event(chunk({}, "stop"), "event: message\n")])],
         "With events.\n", said("With events.")),
    case("multiline_data_event", "any (SSE)", "one event in several data: lines",
         [sse([chunk({"role": "assistant", "content": ""}),
               'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk",\n'
               'data:  "choices": [{"index": 0, "delta": {"content": "Two lines."},\n'
               'data: "finish_reason": null}]}\n\n',
               chunk({}, "stop")])],
         "Two lines.\n", said("Two lines.")),
    case("split_every_byte", "any (chunked HTTP)", "body cut every byte, inside UTF-8 characters",
         [text_stream(UTF8, split=1)], UTF8 + "\n", said(UTF8)),
    case("split_every_3_bytes", "any (chunked HTTP)", "body cut every 3 bytes",
         [text_stream(UTF8, reasoning=UTF8, split=3)],
         reasoning_block(UTF8) + UTF8 + "\n", said(UTF8)),
    case("multi_megabyte_line", "any", "a 3 MB line (one delta)",
         [text_stream(BIG, pieces=[BIG])], BIG + "\n", said(BIG)),
    # ------------------------------------------------------------ chunks, errors, bodies
    case("azure_prompt_filter_chunk", "Azure OpenAI", "prompt-filter chunk with empty choices first",
         [sse([{"id": "", "object": "", "created": 0, "model": "", "choices": [],
                "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
                    "hate": {"filtered": False, "severity": "safe"}}}]},
               chunk({"role": "assistant", "content": ""}), chunk({"content": "Filtered fine."}),
               chunk({}, "stop")])],
         "Filtered fine.\n", said("Filtered fine.")),
    case("usage_only_last_chunk", "OpenAI (include_usage)", "usage-only chunk with empty choices last",
         [text_stream("Counted.", usage=usage(12, 3))], "Counted.\n", said("Counted."),
         stderr=["[test-model: 12 prompt + 3 completion | context: 12/100000 (0.0%)]"]),
    case("error_in_stream_retried", "OpenAI, vLLM", "an error object inside the stream",
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "Partial"}), STREAM_ERROR],
              done=False),
          text_stream("Recovered answer.")],
         "Partial\nRecovered answer.\n", said("Recovered answer."),
         stderr=["error in stream: The server had an error while processing your request", "retry 1/3"]),
    case("openrouter_mid_stream_error", "OpenRouter", 'mid-stream error next to finish_reason "error"',
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "Partial"}),
               OPENROUTER_ERROR], done=False),
          text_stream("Recovered answer.")],
         "Partial\nRecovered answer.\n", said("Recovered answer."),
         stderr=["error in stream: Provider disconnected unexpectedly", "retry 1/3"]),
    case("stream_ignored_plain_json", "local servers, proxies", "stream: true ignored, plain JSON answer",
         [completion("Plain JSON answer.")], "Plain JSON answer.\n", said("Plain JSON answer.")),
    # ------------------------------------------------------------ providers (issue 9)
    case("mistral_content_parts_streamed", "Mistral (Magistral)", "content as a list of thinking and text parts, streamed",
         [sse([chunk({"role": "assistant", "content": ""}),
               chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Two and "}]}]}),
               chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "two."}]}]}),
               chunk({"content": [{"type": "text", "text": "Four"}]}), chunk({"content": "."}),
               chunk({}, "stop")])],
         reasoning_block("Two and two.") + "Four.\n", said("Four.")),
    case("mistral_content_parts_not_streamed", "Mistral (Magistral)", "content parts, not streamed",
         [not_streamed({"role": "assistant", "content": [
             {"type": "thinking", "thinking": [{"type": "text", "text": "Two and two."}]},
             {"type": "text", "text": "Four."}]})],
         reasoning_block("Two and two.") + "Four.\n", said("Four."), cfg={"stream": False}),
    case("gemini_signature_streamed", "Gemini 3 (OpenAI-compatible)",
         "a signed tool call in one fragment without index, finish stop: the signature goes back",
         [stream(calls(dict(frag(id="call_g", name="shell_exec", args=echo("sig")),
                            extra_content={"google": {"thought_signature": "CsoBAVSoXO4X=="}})), finish="stop")],
         traced(echo("sig"), "sig") + TOOLS_DONE + "\n",
         with_calls(dict(call("call_g", echo("sig")), extra_content={"google": {"thought_signature": "CsoBAVSoXO4X=="}})),
         [result("sig")]),
    case("gemini_signature_not_streamed", "Gemini 3 (OpenAI-compatible)", "a signed tool call, not streamed",
         [not_streamed({"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_h", "type": "function", "function": {"name": "shell_exec", "arguments": echo("one")},
              "extra_content": {"google": {"thought_signature": "Sig1=="}}},
             {"id": "call_i", "type": "function", "function": {"name": "shell_exec", "arguments": echo("two")}}]},
             finish="tool_calls")],
         traced(echo("one"), "one") + traced(echo("two"), "two") + TOOLS_DONE + "\n",
         with_calls(dict(call("call_h", echo("one")), extra_content={"google": {"thought_signature": "Sig1=="}}),
                    call("call_i", echo("two"))),
         [result("one"), result("two")], cfg={"stream": False}),
    case("vertex_signature_streamed", "Gemini 3 through Vertex gateways", "extra_content.vertex signature",
         [stream(calls(dict(frag(0, "call_v3", "shell_exec", ""), extra_content={"vertex": {"thought_signature": "VtX=="}})),
                 calls(frag(0, args=echo("vertex"))))],
         traced(echo("vertex"), "vertex") + TOOLS_DONE + "\n",
         with_calls(dict(call("call_v3", echo("vertex")), extra_content={"vertex": {"thought_signature": "VtX=="}})),
         [result("vertex")]),
    case("gemini_signed_text", "Gemini 3 (OpenAI-compatible)", "a signature on a text reply: kept on the message",
         [sse([chunk({"role": "assistant", "content": "Signed "}),
               chunk({"content": "text.", "extra_content": {"google": {"thought_signature": "TxT=="}}}),
               chunk({}, "stop")])],
         "Signed text.\n", said("Signed text.", extra_content={"google": {"thought_signature": "TxT=="}})),
    case("cut_by_length", "any", 'finish_reason "length": said in one line',
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "Half an ans"}),
               chunk({}, "length")])],
         "Half an ans\n", said("Half an ans"), stderr=["[the reply was cut: it reached the output token limit"]),
    case("cut_by_content_filter", "Azure OpenAI, OpenAI", 'finish_reason "content_filter": said in one line',
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "Some of it"}),
               chunk({}, "content_filter")])],
         "Some of it\n", said("Some of it"), stderr=["content filter (finish_reason: content_filter)"]),
    case("surrogate_halves_split", "gateways slicing UTF-16", "an emoji as two surrogate halves in two chunks",
         [sse([chunk({"role": "assistant", "content": ""}),
               'data: {"choices": [{"index": 0, "delta": {"content": "Smile \\ud83d"}}]}\n\n',
               'data: {"choices": [{"index": 0, "delta": {"content": "\\ude00."}}]}\n\n',
               chunk({}, "stop")])],
         "Smile \U0001f600.\n", said("Smile \U0001f600.")),
    case("lone_surrogate", "gateways slicing UTF-16", "a lone surrogate half: replaced, the session still saved",
         [sse([chunk({"role": "assistant", "content": ""}),
               'data: {"choices": [{"index": 0, "delta": {"content": "Half \\ud83d"}}]}\n\n',
               'data: {"choices": [{"index": 0, "delta": {"content": " alone."}}]}\n\n',
               chunk({}, "stop")])],
         "Half \ufffd alone.\n", said("Half \ufffd alone.")),
    case("no_choices_not_streamed", "any", "non-streamed body with empty choices",
         [json_reply({"id": "chatcmpl-1", "object": "chat.completion", "created": CREATED,
                      "model": "test-model", "choices": []}),
          completion("Second try.")],
         "Second try.\n", said("Second try."), cfg={"stream": False},
         stderr=["no choices", "retry 1/3"]),
    # ------------------------------------------------------------ providers (issue 19)
    case("ollama_calls_all_at_index_0", "Ollama (0.20 /v1)",
         "parallel calls each whole in its own chunk, all at index 0, each with its own id",
         [stream(*[chunk({"role": "assistant", "content": "", "tool_calls": [
             {"id": call_id, "index": 0, "type": "function", "function": {"name": "shell_exec", "arguments": args}}]})
             for call_id, args in (("call_o1", echo("one")), ("call_o2", echo("two")), ("call_o3", echo("three")))])],
         traced(echo("one"), "one") + traced(echo("two"), "two") + traced(echo("three"), "three") + TOOLS_DONE + "\n",
         with_calls(call("call_o1", echo("one")), call("call_o2", echo("two")), call("call_o3", echo("three"))),
         [result("one"), result("two"), result("three")]),
    case("llama_server_error_after_text", "llama.cpp (llama-server)", "text, then an error object, no [DONE]",
         [sse([chunk({"role": "assistant", "content": None}), chunk({"content": "Partial"}), LLAMA_ERROR], done=False),
          text_stream("Recovered answer.")],
         "Partial\nRecovered answer.\n", said("Recovered answer."),
         stderr=["error in stream: The model produced output that does not match", "retry 1/3"]),
    case("reasoning_order_kept", "any", "reasoning in three chunks ending in a key's first letter, then the answer",
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "thinking-"}),
               chunk({"reasoning_content": "RC about "}), chunk({"reasoning_content": "numbers"}),
               chunk({"content": "The answer is 42."}), chunk({}, "stop")])],
         reasoning_block("thinking-RC about numbers") + "The answer is 42.\n", said("The answer is 42."),
         cfg={"api_key": "sk-test-4d9c2b"}),
    case("litellm_usage_beside_choices", "LiteLLM proxy", "usage in a last chunk whose choices is not empty",
         [sse([chunk({"role": "assistant"}), chunk({"content": "Counted."}), chunk({}, "length"), LITELLM_USAGE])],
         "Counted.\n", said("Counted."),
         stderr=["[test-model: 12 prompt (5 cached, 7 uncached) + 3 completion | context: 12/100000 (0.0%)]"]),
    # ------------------------------------------------------------ other clients' bug reports
    case("data_null_event", "relays, proxies", "data: null between the chunks",
         [sse([chunk({"role": "assistant", "content": ""}), "data: null\n\n", chunk({"content": "Still "}),
               "data: null\n\n", chunk({"content": "here."}), chunk({}, "stop")])],
         "Still here.\n", said("Still here.")),
    case("moonshot_usage_in_choice", "Moonshot Kimi", "usage inside choices[0] of the last chunk",
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "Counted."}),
               {"id": "chatcmpl-69bb", "object": "chat.completion.chunk", "created": CREATED, "model": "kimi-k2",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "usage": MOONSHOT_USAGE}]}])],
         "Counted.\n", said("Counted."),
         stderr=["[test-model: 1336 prompt (1280 cached, 56 uncached) + 31 completion | context: 1336/100000 (1.3%)]"]),
    case("xai_usage_before_last_chunk", "xAI Grok", "usage on the finish chunk, then an empty-choices chunk",
         [sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "Counted."}),
               chunk({}, "stop", usage=usage(19, 13)),
               {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": CREATED, "model": "grok",
                "choices": []}])],
         "Counted.\n", said("Counted."),
         stderr=["[test-model: 19 prompt + 13 completion | context: 19/100000 (0.0%)]"]),
    case("cumulative_arguments", "DeepSeek through Baidu Qianfan", "every fragment holds all the arguments so far",
         [stream(calls(frag(0, "call_cu", "shell_exec", echo("cumul")[:6])),
                 *[calls(frag(0, args=echo("cumul")[:n])) for n in (12, 20, len(echo("cumul")))])],
         traced(echo("cumul"), "cumul") + TOOLS_DONE + "\n",
         with_calls(call("call_cu", echo("cumul"))), [result("cumul")]),
    case("arguments_resent_whole", "proxies", "arguments in fragments, then all again with id and name",
         [stream(calls(frag(0, "call_rw", "shell_exec", "")), calls(frag(0, args=echo("again")[:9])),
                 calls(frag(0, args=echo("again")[9:])), calls(frag(0, "call_rw", "shell_exec", echo("again"))))],
         traced(echo("again"), "again") + TOOLS_DONE + "\n",
         with_calls(call("call_rw", echo("again"))), [result("again")]),
    case("dashscope_empty_id_fragments", "Qwen (DashScope)", 'continuation fragments with "id": "" and type',
         [stream(calls(frag(0, "call_477c3def1ba54fdcbaad36", "shell_exec", '{"comm')),
                 *[calls(dict(frag(0, "", args=piece), type="function")) for piece in ['and": "echo ', 'qwen"}']])],
         traced(echo("qwen"), "qwen") + TOOLS_DONE + "\n",
         with_calls(call("call_477c3def1ba54fdcbaad36", echo("qwen"))), [result("qwen")]),
    case("name_in_later_fragment", "OpenAI-compatible servers", "id and arguments first, the name later",
         [stream(calls(frag(0, "call_nl", args=echo("named"))), calls(frag(0, name="shell_exec")))],
         traced(echo("named"), "named") + TOOLS_DONE + "\n",
         with_calls(call("call_nl", echo("named"))), [result("named")]),
    case("object_arguments_not_streamed", "llama.cpp (llama-server)", "arguments as a JSON object",
         [not_streamed({"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_ob", "type": "function", "function": {"name": "shell_exec", "arguments": {"command": "echo obj"}}}]},
             finish="tool_calls")],
         traced(echo("obj"), "obj") + TOOLS_DONE + "\n",
         with_calls(call("call_ob", echo("obj"))), [result("obj")], cfg={"stream": False}),
]


def answer(text, cfg):
    """A plain answer in the form the session asks for (streamed or not)."""
    return completion(text) if cfg.get("stream", True) is False else text_stream(text)


def nulls(value, path="message"):
    """The paths of every null inside value."""
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nulls(v, "%s.%s" % (path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nulls(v, "%s[%d]" % (path, i))]
    return []


class ShapeTests(unittest.TestCase):
    """The table above, one subTest per row."""

    def replay(self, shape):
        """Run the two-turn session for one shape; returns (process, server, autosaved messages)."""
        ws = Workspace()
        self.addCleanup(ws.cleanup)
        server = FakeServer().start()
        self.addCleanup(server.stop)
        ws.write_config(server, **shape.cfg)
        server.push(*shape.script)
        if shape.stored.get("tool_calls"):
            server.push(answer(TOOLS_DONE, shape.cfg))
        server.push(answer(NEXT_OK, shape.cfg))
        proc = run_bantam(ws, input="%s\n%s\n" % (FIRST, SECOND), timeout=90)
        server.stop()
        with open(os.path.join(ws.sessions_dir(), "autosave.json"), encoding="utf-8") as f:
            saved = json.load(f)["messages"]
        return proc, server, saved

    def check_stored(self, shape, stored):
        """The stored assistant message is the expected one; made-up ids are unique strings."""
        wanted, got = shape.stored.get("tool_calls", []), stored.get("tool_calls") or []
        self.assertEqual(len(got), len(wanted), stored)
        made_up = [g.get("id") for w, g in zip(wanted, got) if w["id"] is MADE_UP]
        expected = dict(shape.stored)
        if wanted:   # a made-up id is whatever bantam chose; checked below
            expected["tool_calls"] = [dict(w, id=g.get("id")) if w["id"] is MADE_UP else w
                                      for w, g in zip(wanted, got)]
        self.assertEqual(stored, expected)
        for call_id in made_up:
            self.assertIsInstance(call_id, str)
            self.assertTrue(call_id.strip(), "a made-up call id must not be empty")
        self.assertEqual(len(set(made_up)), len(made_up), "made-up ids must differ: %r" % made_up)
        self.assertEqual(nulls(stored), [], "the stored message must hold no null fields")

    def test_every_shape(self):
        """Each server family's shape is printed, stored and sent back as the API expects."""
        for shape in SHAPES:
            with self.subTest(shape.name):
                proc, server, saved = self.replay(shape)
                self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
                out = proc.stdout
                end = out.rfind("> " + NEXT_OK + "\n")
                self.assertTrue(out.startswith("> ") and end > 0, out[-2000:])
                self.assertEqual(out[2:end], shape.printed)
                for text in shape.stderr:
                    self.assertIn(text, proc.stderr)

                # stored: the system prompt, the prompt, then the reply under test
                self.assertEqual(saved[1], {"role": "user", "content": FIRST})
                stored = saved[2]
                self.check_stored(shape, stored)   # exact content: no reasoning folded in
                self.assertNotIn("reasoning", stored, "reasoning text is printed, not stored")

                # sent next: retries repeat the first request; tool results answer each call id
                bodies = server.bodies
                tries = len(shape.script)
                for body in bodies[1:tries]:
                    self.assertEqual(body["messages"], bodies[0]["messages"], "a retry adds nothing")
                ids = [c["id"] for c in stored.get("tool_calls", [])]
                self.assertEqual(len(bodies), tries + bool(ids) + 1, "no request more or less")
                tool_messages = saved[3:3 + len(ids)]
                self.assertEqual(tool_messages, [{"role": "tool", "tool_call_id": i, "content": r}
                                                 for i, r in zip(ids, shape.results)])
                if ids:
                    self.assertEqual(bodies[tries]["messages"][2:], saved[2:3 + len(ids)])
                last = bodies[-1]["messages"]
                self.assertEqual(last[2], stored, "the next turn sends the stored message back")
                self.assertEqual(last[-1], {"role": "user", "content": SECOND})
                self.assertEqual(saved[-1], {"role": "assistant", "content": NEXT_OK})

    def test_table_names_every_case(self):
        """The table in this module's docstring (mirrored in the README) names every case."""
        rows = [line for line in __doc__.splitlines() if line.startswith("| ") and "`" in line]
        named = [row.rsplit("`", 2)[1] for row in rows]
        self.assertEqual(named, [s.name for s in SHAPES])
        self.assertEqual(len(set(named)), len(named))


class FailingShapeTests(unittest.TestCase):
    """Shapes that fail on every try end the turn clearly and store nothing half-made."""

    def run_failing(self, items, **cfg):
        """Batch-run one prompt against a server that answers items; (process, server, saved)."""
        ws = Workspace()
        self.addCleanup(ws.cleanup)
        server = FakeServer(items).start()
        self.addCleanup(server.stop)
        ws.write_config(server, **cfg)
        ws.write("prompt.txt", FIRST)
        proc = run_bantam(ws, "prompt.txt", timeout=60)
        server.stop()
        with open(os.path.join(ws.sessions_dir(), "autosave.json"), encoding="utf-8") as f:
            saved = json.load(f)["messages"]
        return proc, server, saved

    def test_error_in_every_stream_fails_after_the_retries(self):
        """An error object in every stream: each retry is announced, then exit 1 with the message."""
        bad = [sse([chunk({"content": "Part"}), STREAM_ERROR], done=False) for _ in range(6)]
        proc, server, saved = self.run_failing(bad)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(server.posts), 4, "one try and the three retries of the backoff ladder")
        self.assertIn("The server had an error while processing your request", proc.stderr)
        self.assertIn("gave up after 3 retries", proc.stderr)
        self.assertEqual([m["role"] for m in saved], ["system", "user"], "no partial reply is stored")

    def test_no_choices_every_time_fails_after_the_retries(self):
        """A non-streamed body with empty choices every time: exit 1 saying so."""
        empty = {"id": "chatcmpl-1", "object": "chat.completion", "created": CREATED,
                 "model": "test-model", "choices": []}
        proc, server, saved = self.run_failing([json_reply(empty) for _ in range(6)], stream=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(server.posts), 4)
        self.assertIn("no choices", proc.stderr)
        self.assertEqual([m["role"] for m in saved], ["system", "user"])


if __name__ == "__main__":
    unittest.main()
