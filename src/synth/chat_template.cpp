// Chat templates of synthetic models: ChatML turns as the real families render them
// (ARCHITECTURES.md 2.4, 3.4, 10). Assistant turns before the last user turn lose their reasoning (the text
// up to </think>). lfm2moe follows LFM2.5: the template emits bos_token itself and the generation prompt
// opens <think> (reasoning-only model). qwen3moe follows Qwen3: no BOS, and enable_thinking=false closes an
// empty reasoning block. qwen35moe follows Qwen3.5: as Qwen3, but the generation prompt opens the reasoning
// block ("<think>\n") unless enable_thinking=false closes an empty one. Only constructs the real Qwen3 / LFM2
// templates use (namespace, split, [-1], strip, if/else), so every engine that renders those renders these.
#include <string>

#include "synth/vocab.h"

namespace df::synth {

namespace {

constexpr const char* kFindLastUser =
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}";

constexpr const char* kTurns =
    "{%- for message in messages -%}"
    "{%- set content = message['content'] -%}"
    "{%- if message['role'] == 'assistant' and loop.index0 < ns.last_user -%}"
    "{%- set content = content.split('</think>')[-1].strip() -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}";

// Hunyuan-dense style: BOS, the system prompt closed by place-holder 3, user turns after <｜hy_User｜>,
// assistant turns after <｜hy_Assistant｜> closed by the EOS place-holder 2; enable_thinking=false closes an
// empty reasoning block, as the Qwen3 family does.
constexpr const char* kHunyuanTemplate =
    "{{- bos_token -}}"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- set content = message['content'] -%}"
    "{%- if message['role'] == 'system' -%}"
    "{{- content + '<\uFF5Chy_place\u2581holder\u2581no\u25813\uFF5C>' -}}"
    "{%- elif message['role'] == 'user' -%}"
    "{{- '<\uFF5Chy_User\uFF5C>' + content -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- if loop.index0 < ns.last_user -%}{%- set content = content.split('</think>')[-1].strip() -%}{%- "
    "endif -%}"
    "{{- '<\uFF5Chy_Assistant\uFF5C>' + content + '<\uFF5Chy_place\u2581holder\u2581no\u25812\uFF5C>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<\uFF5Chy_Assistant\uFF5C>' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}";

}  // namespace

std::string chat_template(Arch arch) {
  if (arch == Arch::hy_v3) return kHunyuanTemplate;
  if (arch == Arch::gemma4) return gemma4_chat_template();
  std::string t;
  if (arch == Arch::lfm2moe) {
    t += "{{- bos_token -}}";
    t += kFindLastUser;
    t += kTurns;
    t += "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>' -}}{%- endif -%}";
  } else if (arch == Arch::qwen35moe) {
    t += kFindLastUser;
    t += kTurns;
    t += "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
         "{%- if enable_thinking is defined and enable_thinking is false -%}"
         "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- else -%}{{- '<think>\\n' -}}{%- endif -%}{%- endif -%}";
  } else {
    t += kFindLastUser;
    t += kTurns;
    t += "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
         "{%- if enable_thinking is defined and enable_thinking is false -%}"
         "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}";
  }
  return t;
}

}  // namespace df::synth
