"""Chat templates render what transformers' apply_chat_template(add_generation_prompt=True)
renders (recorded by tests/support/record_chat_templates.py)."""

import json
import os

import pytest

from transmuter.preprocess.text.chat_template import (ChatTemplateError, find_template, render,
                                                 special_tokens)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = json.load(open(os.path.join(ROOT, "tests", "fixtures", "chat_templates.json")))


def _folder(source):
    return os.path.join(ROOT if source.startswith("tests") else os.path.dirname(ROOT), source)


@pytest.mark.parametrize("record", RECORDS,
                         ids=[f"{r['source'].split('/', 2)[-1]}-{r['conversation']}-"
                              f"{'-'.join(r['options'])}" for r in RECORDS])
def test_renders_like_transformers(record):
    path = os.path.join(_folder(record["source"]), "tokenizer_config.json")
    if not os.path.exists(path):
        pytest.skip(f"{record['source']} is not present")
    config = json.load(open(path))
    text = render(find_template(tokenizer_config=config), record["messages"],
                  special_tokens=special_tokens(config), tools=record["tools"],
                  **record["options"])
    assert text == record["rendered"]


def test_bad_messages_and_templates():
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="unknown role"):
        render(template, [{"role": "wizard", "content": "hi"}])
    with pytest.raises(ChatTemplateError, match="non-empty list"):
        render(template, [])
    with pytest.raises(ChatTemplateError, match="refused.*no system"):
        render("{{ raise_exception('no system') }}", [{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="no chat template"):
        find_template(tokenizer_config={})
    named = [{"name": "default", "template": "a"}, {"name": "tool_use", "template": "b"}]
    assert find_template(tokenizer_config={"chat_template": named}) == "a"
    assert find_template(tokenizer_config={"chat_template": named}, tools=[{}]) == "b"


def test_sandbox_blocks_attribute_access():
    with pytest.raises(ChatTemplateError):
        render("{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}",
               [{"role": "user", "content": "x"}])
