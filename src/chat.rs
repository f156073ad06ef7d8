//! Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with minijinja, with the
//! variables Hugging Face templates expect (`messages`, `add_generation_prompt`, `enable_thinking`,
//! `tools`, `bos_token`, `eos_token`) and Python-style string methods (`.startswith`, `.split`, …).
//! Files without a template get [`BUILTIN_CHATML`], the Qwen3.5 ChatML format.

use minijinja::{Environment, Error, ErrorKind, Value};

/// Qwen3.5-style ChatML: optional system turn, earlier assistant turns without their reasoning,
/// the last assistant turn with it, and a generation prompt that opens (or, with thinking off,
/// closes) the `<think>` block.
pub const BUILTIN_CHATML: &str = r#"{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if loop.index0 > ns.last_user and m.reasoning_content -%}
{{- '<think>\n' + m.reasoning_content | trim + '\n</think>\n\n' -}}
{%- endif -%}
{{- (m.content or '') | trim + '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + m.role + '\n' + (m.content or '') + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\n\n</think>\n\n' -}}{%- else -%}{{- '<think>\n' -}}{%- endif -%}
{%- endif -%}"#;

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    pub builtin: bool,
}

/// What a template is rendered with.
#[derive(Clone, Debug, Default)]
pub struct ChatInput {
    /// `[{role, content, reasoning_content?, tool_calls?, …}]`.
    pub messages: Value,
    /// Tool definitions (OpenAI shape) or none.
    pub tools: Option<Value>,
    pub add_generation_prompt: bool,
    /// `None` leaves the template's default (thinking on for Qwen3.5).
    pub enable_thinking: Option<bool>,
    pub bos_token: String,
    pub eos_token: String,
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

impl ChatTemplate {
    /// Compiles `source`, or the built-in ChatML when `source` is `None`.
    pub fn new(source: Option<&str>) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |_fmt: String| -> Value { Value::from("") });
        // Hugging Face renders chat templates with trim_blocks and lstrip_blocks on.
        let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
        env.set_syntax(syntax.map_err(|e| e.to_string())?);
        let builtin = source.is_none();
        env.add_template_owned("chat", source.unwrap_or(BUILTIN_CHATML).to_string())
            .map_err(|e| format!("the chat template does not compile: {e}"))?;
        Ok(ChatTemplate { env, builtin })
    }

    pub fn render(&self, input: &ChatInput) -> Result<String, String> {
        let tmpl = self.env.get_template("chat").map_err(|e| e.to_string())?;
        let mut ctx = vec![
            ("messages", input.messages.clone()),
            ("add_generation_prompt", Value::from(input.add_generation_prompt)),
            ("bos_token", Value::from(input.bos_token.clone())),
            ("eos_token", Value::from(input.eos_token.clone())),
        ];
        if let Some(t) = &input.tools {
            ctx.push(("tools", t.clone()));
        }
        if let Some(e) = input.enable_thinking {
            ctx.push(("enable_thinking", Value::from(e)));
        }
        let ctx: std::collections::BTreeMap<&str, Value> = ctx.into_iter().collect();
        tmpl.render(ctx).map_err(|e| {
            let mut msg = format!("chat template error: {e}");
            if let Some(detail) = e.detail() {
                msg = format!("{msg} ({detail})");
            }
            msg
        })
    }
}

/// Builds a `messages` value from (role, content) pairs.
pub fn simple_messages(turns: &[(&str, &str)]) -> Value {
    Value::from(
        turns
            .iter()
            .map(|(r, c)| {
                let m: std::collections::BTreeMap<&str, Value> =
                    [("role", Value::from(*r)), ("content", Value::from(*c))].into_iter().collect();
                Value::from(m)
            })
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn input(turns: &[(&str, &str)], think: Option<bool>) -> ChatInput {
        ChatInput { messages: simple_messages(turns), add_generation_prompt: true, enable_thinking: think, ..Default::default() }
    }

    #[test]
    fn builtin_chatml() {
        let t = ChatTemplate::new(None).unwrap();
        let s = t.render(&input(&[("system", "Be brief."), ("user", "Hi")], None)).unwrap();
        assert_eq!(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
        let s = t.render(&input(&[("user", "Hi")], Some(false))).unwrap();
        assert!(s.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "{s}");
    }

    #[test]
    fn python_string_methods_and_errors() {
        let src = "{% for m in messages %}{% if m.content.startswith('/') %}{{ raise_exception('no commands') }}{% endif %}{{ m.content.split(' ')[0] | upper }}{{ m | tojson }}{% endfor %}";
        let t = ChatTemplate::new(Some(src)).unwrap();
        assert!(t.render(&input(&[("user", "hello world")], None)).unwrap().starts_with("HELLO{"));
        let e = t.render(&input(&[("user", "/cmd")], None)).unwrap_err();
        assert!(e.contains("no commands"), "{e}");
        assert!(ChatTemplate::new(Some("{% for %}")).is_err());
    }
}
