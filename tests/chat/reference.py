#!/usr/bin/env python3
"""Renders chat-template test cases as Hugging Face transformers renders them, into reference.json.

    python3 tests/chat/reference.py           # writes tests/chat/reference.json
    python3 tests/chat/reference.py --check   # fails if reference.json is not what this script writes

The reference renderer is transformers' `apply_chat_template(..., tokenize=False)` (see
../shared/fixtures/chat-templates/README.md): jinja2's ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols, `tojson` = json.dumps(ensure_ascii=False, ...), the
globals raise_exception and strftime_now, and render(messages=..., tools=..., documents=None,
add_generation_prompt=..., bos_token=..., eos_token=..., **kwargs) with the values as given.

Before rendering, messages get the preparation clef applies to OpenAI requests (src/chat.rs
`prepare_messages`, mirrored by `prepare` below): null content -> '', text parts joined for
templates that do not render parts, null reasoning_content / tool_calls dropped, tool-call
`arguments` given as a JSON string parsed (as llama.cpp does). Everything else is transformers'.

Each case: the request exactly as a client sends it (JSON text: key order and 1.0 kept), and what
transformers gives: {"text": ...}, {"raised": message} (raise_exception), {"render_error": type}
(another jinja/Python error), or {"bad_request": why} (refused by the preparation step).
tests/chat_templates.rs (native) and tests/js/chat-template.test.mjs (wasm) compare byte for byte.
"""

import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent.parent / "shared" / "fixtures" / "chat-templates"
OUT = HERE / "reference.json"

# Small templates for what the real ones do not exercise.
INLINE = {
    "tojson-options": (
        "{% for t in tools %}{{ t | tojson }}\n{{ t | tojson(indent=2) }}\n{{ t | tojson(indent='\\t', sort_keys=true) }}\n"
        "{{ t | tojson(separators=(',', ':')) }}\n{{ t | tojson(ensure_ascii=true) }}\n{% endfor %}"
    ),
    "values": (
        "{% for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v }}|{{ v | string }}|{{ v | tojson }};{% endfor %}\n{% endfor %}"
    ),
    "loop-adjacent": (
        "{% for m in messages %}{{ loop.index0 }}:{{ m.role }}"
        "<{{ loop.previtem.role if loop.previtem else '-' }},{{ loop.nextitem.role if loop.nextitem else '-' }}>\n{% endfor %}"
    ),
    "strings": (
        "{% for m in messages %}{{ m.content.strip().split('\\n')[0] | upper }}|{{ m.content.startswith('<tool_response>') }}"
        "|{{ m.content.rstrip('!').lstrip('\\n') }}|{{ m.content | length }}|{{ m.content | trim }}\n{% endfor %}"
    ),
    "plain-content": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
}


def template_source(name):
    if name in INLINE:
        return INLINE[name]
    return (SHARED / f"{name}.jinja").read_text()


def environment():
    """transformers' chat-template environment (AssistantTracker, for {% generation %}, left out)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class BadRequest(Exception):
    pass


PROBE = "\x01clef-probe\x01"


def renders_parts(template):
    try:
        out = template.render(messages=[{"role": "user", "content": [{"type": "text", "text": PROBE}]}], tools=None,
                              documents=None, add_generation_prompt=True, bos_token="", eos_token="")
        return PROBE in out
    except Exception:
        return False


def prepare(messages, keep_parts):
    """clef's preparation of OpenAI messages (src/chat.rs prepare_messages)."""
    if not isinstance(messages, list):
        raise BadRequest("messages must be an array")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("a message needs a role")
        m = dict(m)
        c = m.get("content")
        if c is None:
            m["content"] = ""
        elif isinstance(c, list):
            text = ""
            for p in c:
                ty = p.get("type") if isinstance(p, dict) else None
                if ty not in (None, "text"):
                    raise BadRequest(f"content part type '{ty}' is not supported")
                if not isinstance(p, dict) or not isinstance(p.get("text"), str):
                    raise BadRequest("a content part needs text")
                text += p["text"]
            if not keep_parts:
                m["content"] = text
        for k in ("reasoning_content", "tool_calls"):
            if k in m and m[k] is None:
                del m[k]
        if isinstance(m.get("tool_calls"), list):
            calls = []
            for call in m["tool_calls"]:
                f = call.get("function") if isinstance(call, dict) else None
                if isinstance(f, dict) and isinstance(f.get("arguments"), str):
                    a = f["arguments"]
                    try:
                        parsed = json.loads(a) if a.strip() else {}
                    except json.JSONDecodeError as e:
                        raise BadRequest(f"arguments are not JSON: {e}")
                    call = {k: ({**f, "arguments": parsed} if k == "function" else v) for k, v in call.items()}
                calls.append(call)
            m["tool_calls"] = calls
        out.append(m)
    return out


def render(env, template_name, request):
    template = env.from_string(template_source(template_name))
    try:
        messages = prepare(request["messages"], renders_parts(template))
    except BadRequest as e:
        return {"bad_request": str(e)}
    kwargs = dict(request.get("chat_template_kwargs") or {})
    if "enable_thinking" in request:
        kwargs["enable_thinking"] = request["enable_thinking"]
    try:
        text = template.render(messages=messages, tools=request.get("tools"), documents=None,
                               add_generation_prompt=request.get("add_generation_prompt", True),
                               bos_token="", eos_token="<|im_end|>", **kwargs)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"raised": e.message}
        return {"render_error": type(e).__name__}
    except Exception as e:  # noqa: BLE001 - a Python error inside the template
        return {"render_error": type(e).__name__}
    return {"text": text}


# ------------------------------------------------------------------------------------------------
# Conversations

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city. Use when temperature < 0 or > 30 & 'extreme'; returns °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Zürich\" or 東京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.0},
                "threshold": {"type": "number", "default": 0.5, "multipleOf": 1e-05},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\n\nReturns a list of {title, url}.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filters": {"type": "object", "properties": {"site": {"type": ["string", "null"]}, "after": {"type": "string"}}},
                "top_k": {"type": "integer", "default": 10},
                "safe": {"type": "boolean", "default": True},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, SEARCH]
SYS = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What's the weather in Paris?"}


def call(id_, name, args, as_string=True):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def tool(id_, content):
    return {"role": "tool", "tool_call_id": id_, "content": content}


ASSISTANT_CALL = {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"})]}

CASES = [
    # (name, template, request)
    ("one user turn", "Qwen3.5", {"messages": [USER]}),
    ("system + user, thinking off", "Qwen3.5", {"messages": [SYS, USER], "enable_thinking": False}),
    ("system + user, thinking on", "Qwen3.5", {"messages": [SYS, USER], "enable_thinking": True}),
    ("thinking through chat_template_kwargs", "Qwen3.5", {"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}}),
    ("no generation prompt", "Qwen3.5", {"messages": [SYS, USER], "add_generation_prompt": False}),
    ("history with reasoning_content", "Qwen3.5", {"messages": [
        SYS, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "\nAdd three and three.\n"},
    ], "add_generation_prompt": False}),
    ("inline <think> in assistant content", "Qwen3.5", {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello!"},
        {"role": "user", "content": "How are you?"},
        {"role": "assistant", "content": "<think>Fine question.</think>I'm well."},
    ]}),
    ("reasoning_content null", "Qwen3.5", {"messages": [USER, {"role": "assistant", "content": "Sunny.", "reasoning_content": None}], "add_generation_prompt": False}),
    ("unicode and markup in content", "Qwen3.5", {"messages": [
        {"role": "system", "content": "  Réponds en français. <b>&amp;</b> 'quotes' \"double\"  "},
        {"role": "user", "content": "東京の天気は？ 😀\n\tTabs & <tags>"},
    ]}),
    ("tools", "Qwen3.5", {"messages": [USER], "tools": TOOLS}),
    ("tools + system", "Qwen3.5", {"messages": [SYS, USER], "tools": TOOLS}),
    ("tools + empty system", "Qwen3.5", {"messages": [{"role": "system", "content": "   "}, USER], "tools": [WEATHER]}),
    ("tool call, arguments as JSON string, then result", "Qwen3.5", {"messages": [
        SYS, USER, ASSISTANT_CALL, tool("call_1", '{"temp": 21.0, "sky": "clear"}'),
    ], "tools": TOOLS}),
    ("tool call with arguments as an object", "Qwen3.5", {"messages": [
        USER, {"role": "assistant", "content": "", "tool_calls": [call("c1", "get_weather", {"city": "Paris", "days": 3}, as_string=False)]},
        tool("c1", "21 °C"),
    ], "tools": TOOLS}),
    ("tool call with text before it", "Qwen3.5", {"messages": [
        USER, {"role": "assistant", "content": "Let me check that for you.", "tool_calls": [call("c1", "get_weather", {"city": "Paris"})]},
        tool("c1", "sunny"),
    ], "tools": TOOLS}),
    ("several calls, several results in a row, answer, next question", "Qwen3.5", {"messages": [
        SYS, {"role": "user", "content": "Weather in Paris and Berlin, and search for news."},
        {"role": "assistant", "content": None, "reasoning_content": "Three calls needed.", "tool_calls": [
            call("c1", "get_weather", {"city": "Paris"}),
            call("c2", "get_weather", {"city": "Berlin", "unit": "fahrenheit"}),
            call("c3", "search", {"query": "news", "filters": {"site": None, "after": "2024-01-01"}, "top_k": 3, "safe": False}),
        ]},
        tool("c1", "Paris: 21 °C"), tool("c2", "Berlin: 60 °F"), tool("c3", '[{"title": "A", "url": "https://a.example/?q=1&r=2"}]'),
        {"role": "assistant", "content": "Paris 21 °C, Berlin 60 °F; news: A.", "reasoning_content": "Summarize."},
        {"role": "user", "content": "Thanks! And Rome?"},
    ], "tools": TOOLS}),
    ("tool result last, thinking off", "Qwen3.5", {"messages": [USER, ASSISTANT_CALL, tool("call_1", "rain")], "tools": TOOLS, "enable_thinking": False}),
    ("tool result followed by user", "Qwen3.5", {"messages": [USER, ASSISTANT_CALL, tool("call_1", "rain"), {"role": "user", "content": "Umbrella?"}], "tools": TOOLS}),
    ("agent loop: two rounds of calls", "Qwen3.5", {"messages": [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("a", "search", {"query": "Paris weather"})]},
        tool("a", "no results"),
        {"role": "assistant", "content": "Trying the weather tool.", "reasoning_content": "Search failed.", "tool_calls": [call("b", "get_weather", {"city": "Paris"})]},
        tool("b", "sunny, 25.5"),
    ], "tools": TOOLS}),
    ("argument values: numbers, bools, null, nested, multiline, unicode", "Qwen3.5", {"messages": [
        USER, {"role": "assistant", "content": None, "tool_calls": [call("c", "search", {
            "query": "line one\nline two <&>", "top_k": 1.0, "ratio": 1e-07, "big": 1e+16, "n": -3, "safe": True, "off": False,
            "nothing": None, "filters": {"site": "example.org", "tags": ["a", "b"], "w": 0.25}, "list": [1, 2.5, "x"], "name": "Zoë 😀",
        })]}, tool("c", "ok"),
    ], "tools": [SEARCH]}),
    ("empty arguments string", "Qwen3.5", {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}, tool("x", "?")], "tools": TOOLS}),
    ("content parts", "Qwen3.5", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": " Very brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": ", world"}]},
    ]}),
    ("user turn that is a tool response (multi-step)", "Qwen3.5", {"messages": [
        {"role": "user", "content": "Find it."},
        {"role": "assistant", "content": "Searching."},
        {"role": "user", "content": "<tool_response>\nfound\n</tool_response>"},
    ]}),
    ("continue the final assistant message", "Qwen3.5", {"messages": [USER, {"role": "assistant", "content": "It is"}], "add_generation_prompt": False}),
    ("numbers in tool schemas keep their form", "Qwen3.5", {"messages": [USER], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0.0, "maximum": 100, "default": 2.50}}}}}]}),
    ("tool definitions in a custom key order", "Qwen3.5", {"messages": [USER], "tools": [{"function": {
        "parameters": {"required": ["b", "a"], "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "type": "object"},
        "name": "zeta", "description": "Keys out of alphabetical order."}, "type": "function"}]}),
    # Errors the template raises.
    ("error: no messages", "Qwen3.5", {"messages": []}),
    ("error: system only", "Qwen3.5", {"messages": [SYS]}),
    ("error: system not first", "Qwen3.5", {"messages": [USER, SYS]}),
    ("error: unknown role", "Qwen3.5", {"messages": [{"role": "developer", "content": "x"}, USER]}),
    ("error: content is an object", "Qwen3.5", {"messages": [{"role": "user", "content": {"text": "x"}}]}),
    ("error: only tool responses", "Qwen3.5", {"messages": [{"role": "user", "content": "<tool_response>x</tool_response>"}]}),
    # Refused before rendering (bad_request).
    ("refused: image part", "Qwen3.5", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}),
    ("refused: arguments not JSON", "Qwen3.5", {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{city: Paris}"}}]}, tool("x", "?")]}),
    ("refused: message without role", "Qwen3.5", {"messages": [{"content": "x"}]}),
    # Qwen3-Coder (the origin of the XML tool-call format).
    ("coder: tools", "Qwen3-Coder", {"messages": [USER], "tools": TOOLS}),
    ("coder: system, tools, calls and results", "Qwen3-Coder", {"messages": [
        SYS, USER, {"role": "assistant", "content": "Checking.", "tool_calls": [call("c1", "get_weather", {"city": "Paris", "days": 2}),
                                                                            call("c2", "search", {"query": "x", "filters": {"site": "a"}})]},
        tool("c1", "sun"), tool("c2", "[]"), {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Thanks"},
    ], "tools": TOOLS}),
    ("coder: no tools", "Qwen3-Coder", {"messages": [SYS, USER, {"role": "assistant", "content": None}], "add_generation_prompt": False}),
    # Python's conventions, one at a time.
    ("tojson options", "tojson-options", {"messages": [USER], "tools": [
        {"b": 1, "a": [1.0, 2, {"z": None, "é": "ü<>&'"}], "c": {}, "d": [], "e": True, "f": 1e-05, "g": 123456789012345678},
    ]}),
    ("printed values", "values", {"messages": [{"role": "user", "content": "x", "n": 3, "f": 1.0, "g": 0.1, "h": 1e-05, "big": 1e+16, "t": True,
                                                "no": None, "list": [1, "a", None, 2.5, "it's"], "map": {"k": "v", "q": "say \"hi\""}}]}),
    ("loop.previtem and loop.nextitem", "loop-adjacent", {"messages": [SYS, USER, ASSISTANT_CALL, tool("call_1", "a"), tool("call_2", "b"), USER]}),
    ("python string methods", "strings", {"messages": [
        {"role": "user", "content": "\nfirst line\nsecond!!"}, {"role": "user", "content": "<tool_response>x</tool_response>"}]}),
    ("content parts joined for a plain template", "plain-content", {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, {"role": "assistant", "content": None}]}),
]


def build():
    env = environment()
    cases = []
    for name, template, request in CASES:
        cases.append({
            "name": name,
            "template": template,
            "request": json.dumps(request, ensure_ascii=False),
            "expected": render(env, template, request),
        })
    return {
        "generated_by": "tests/chat/reference.py (jinja2 " + jinja2.__version__ + ")",
        "inline_templates": INLINE,
        "cases": cases,
    }


def main():
    text = json.dumps(build(), ensure_ascii=False, indent=1) + "\n"
    if "--check" in sys.argv:
        if OUT.read_text() != text:
            sys.exit(f"{OUT} is out of date: run python3 {Path(__file__).relative_to(HERE.parent.parent)}")
        print(f"{OUT.name}: up to date")
        return
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(CASES)} cases)")


if __name__ == "__main__":
    main()
