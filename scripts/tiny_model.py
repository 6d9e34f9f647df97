"""Build a tiny random-weight chat model that a real vLLM can serve on the CPU, offline.

    python scripts/tiny_model.py DIR

The engine tests need the engine's own token ids and logprobs, not sensible text, so the
model is noise: a byte-level BPE tokenizer trained on the Python standard library's sources,
a ChatML chat template that renders tools, assistant tool calls and tool results (vLLM's
`hermes` tool parser reads `<tool_call>` blocks), and a 2-layer Qwen2 with random weights
(seed fixed, so a rebuild with the same Python gives the same files).

A random model never ends its turn, and Claude Code treats a `max_tokens` stop as an error, so
the model is made to stop: one residual dimension is held at a constant (set in every embedding
row, and no layer writes into it), and only the end-of-turn row of the untied output head reads
it. Greedy decoding then ends at once; at temperature 1 about one token in five ends the turn.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

SEED = 0
VOCAB = 4096
HIDDEN = 128
STOP_DIM = 0  # the residual dimension that carries "end the turn"
STOP_LOGIT = 7.0  # e^7 / (e^7 + 4095) ~ 0.2: one sampled token in five ends the turn
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}"
    "{%- set system = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}"
    "<|im_start|>system\n{% if system %}{{ system }}\n\n{% endif %}# Tools\n<tools>\n"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "For each function call, return a json object within <tool_call></tool_call> tags."
    "<|im_end|>\n"
    "{%- elif system %}<|im_start|>system\n{{ system }}<|im_end|>\n{%- endif %}"
    "{%- for message in rest %}"
    "{%- if message.role == 'assistant' %}<|im_start|>assistant\n"
    "{%- if message.content %}{{ message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}\n<tool_call>\n"
    '{"name": "{{ call.function.name }}", "arguments": '
    "{%- if call.function.arguments is string %} {{ call.function.arguments }}"
    "{%- else %} {{ call.function.arguments | tojson }}{%- endif %}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def corpus() -> list[str]:
    """The standard library's own sources, in a fixed order: local text, no download."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py"))[:200]
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:], chat_template=CHAT_TEMPLATE)


def model(end_of_turn: int, pad: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(SEED)
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=2048, tie_word_embeddings=False,
        eos_token_id=end_of_turn, pad_token_id=pad, bos_token_id=None)
    m = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        m.model.embed_tokens.weight[:, STOP_DIM] = 1.0
        for layer in m.model.layers:  # nothing writes into the stop dimension
            layer.self_attn.o_proj.weight[STOP_DIM, :] = 0.0
            layer.mlp.down_proj.weight[STOP_DIM, :] = 0.0
        head = m.lm_head.weight
        head[:, STOP_DIM] = 0.0
        # Calibrate on one forward pass: the stop dimension's value after the final norm.
        ids = torch.arange(1, 64).unsqueeze(0)
        hidden = m.model(ids).last_hidden_state[0, -1, STOP_DIM].item()
        head[end_of_turn, STOP_DIM] = STOP_LOGIT / hidden
    return m.to(torch.bfloat16)


def main(out: str) -> None:
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    end_of_turn = tok.convert_tokens_to_ids("<|im_end|>")
    model(end_of_turn, tok.pad_token_id).save_pretrained(target, safe_serialization=True)
    tok.save_pretrained(target)
    # transformers writes the generation config's eos from the model config; vLLM reads it
    print(f"tiny model in {target} (vocab {VOCAB}, end of turn id {end_of_turn})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py DIR")
    main(sys.argv[1])
