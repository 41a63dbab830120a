"""Record transformers' apply_chat_template renderings of the chat templates in the fixtures and
in ../shared/hub-files, for tests/test_generation_chat.py. Run in the export venv (no network):

    /work/venvs/export/bin/python tests/support/record_chat_templates.py
"""

import glob
import json
import os

from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_templates.json")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
CONVERSATIONS = {
    "user": [{"role": "user", "content": "What is the capital of France?"}],
    "system": [{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "Hi there"}],
    "multi_turn": [{"role": "user", "content": "Hello"},
                   {"role": "assistant", "content": "Hi! How can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "tool_call": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"type": "function", "function": {"name": "get_weather",
                                                        "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "name": "get_weather", "content": "22 C, sunny"}],
}


def sources():
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/*/tokenizer_config.json"))):
        yield os.path.relpath(os.path.dirname(path), ROOT)
    for path in sorted(glob.glob(os.path.join(SHARED, "hub-files/*/*/tokenizer_config.json"))):
        yield os.path.relpath(os.path.dirname(path), os.path.dirname(ROOT))


def renderer(folder, config):
    """apply_chat_template of the folder's tokenizer; for a folder whose tokenizer files are
    incomplete, transformers' own render_jinja_template with the config's special tokens (what
    apply_chat_template passes it)."""
    try:
        tok = AutoTokenizer.from_pretrained(folder)
        return lambda m, tools, options: tok.apply_chat_template(
            m, tools=tools, tokenize=False, add_generation_prompt=True, **options)
    except Exception:
        from transformers.utils.chat_template_utils import render_jinja_template
        keys = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token", "additional_special_tokens")
        special = {k: (config[k]["content"] if isinstance(config[k], dict) else config[k])
                   for k in keys if config.get(k) is not None}
        return lambda m, tools, options: render_jinja_template(
            conversations=[m], tools=tools, chat_template=config["chat_template"],
            add_generation_prompt=True, **special, **options)[0][0]


def main():
    records = []
    for source in sources():
        folder = os.path.join(ROOT if source.startswith("tests") else os.path.dirname(ROOT),
                              source)
        config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
        template = config.get("chat_template")
        if not isinstance(template, str):
            continue  # only tokenizer templates (processor templates take image content)
        render = renderer(folder, config)
        for name, messages in CONVERSATIONS.items():
            tools = TOOLS if "tool" in name else None
            if tools and "tools" not in template:
                continue
            for options in ({}, {"enable_thinking": False}) if "enable_thinking" in template \
                    else ({},):
                text = render(messages, tools, options)
                records.append({"source": source, "conversation": name, "messages": messages,
                                "tools": tools, "options": options, "rendered": text})
    with open(OUT, "w") as f:
        json.dump(records, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(records)} renderings from {len({r['source'] for r in records})} templates")


if __name__ == "__main__":
    main()
