"""A tiny random Llama with a locally trained tokenizer and a chat template, for serving with vLLM on a CPU.

    python scripts/make_tiny_model.py DIR     # run with the vLLM venv's Python (transformers, tokenizers)

Hidden 256, intermediate 688, 4 layers, 8 heads, 2 kv heads, vocab 1024, fp32 (the shapes of the real vLLM
traces in tests/profile/fixtures/), positions up to 8192: autotune's own agent prompts are a few thousand tokens,
and the self-optimising run sends them to this model. The byte-level BPE is trained on 20 files of the Python standard library,
so nothing is downloaded; the weights are seeded, so every run writes the same model and greedy outputs
repeat. The chat template lets the OpenAI chat endpoint serve it (the agent's own requests are chats).
"""

import glob
import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 1024
MAX_POSITIONS = 8192
VERSION = "2"  # scripts/setup_vllm_cpu.sh remakes a model written by another version
# <s>role\ncontent</s> per message, then <s>assistant\n for the reply
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant\n{% endif %}")


def tokenizer() -> PreTrainedTokenizerFast:
    files = sorted(glob.glob(os.path.join(os.path.dirname(json.__file__), "*.py")))[:20]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>", "<unk>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS,
                      bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, torch_dtype="float32")
    return LlamaForCausalLM(cfg).to(torch.float32)


def main(out: str) -> None:
    tokenizer().save_pretrained(out)
    model().save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "made_by.txt"), "w") as f:
        f.write(f"scripts/make_tiny_model.py {VERSION}\n")
    print(f"wrote {out}: {sorted(os.listdir(out))}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "model")
