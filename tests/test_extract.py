"""Code extraction from LLM answers."""

from __future__ import annotations

from agentloop.providers.extract import code_blocks, extract_code

KERNEL = "import torch\n\n\ndef softmax(x):\n    return torch.softmax(x, -1)\n"


def test_tagged_block_with_prose_around():
    answer = f"Sure! Here is the kernel:\n\n```python\n{KERNEL}```\n\nIt uses one program per row."
    assert extract_code(answer, "softmax") == KERNEL


def test_untagged_and_tilde_fences():
    assert extract_code(f"```\n{KERNEL}```", "softmax") == KERNEL
    assert extract_code(f"~~~py\n{KERNEL}~~~\n", "softmax") == KERNEL
    # A ``` line inside a ~~~ block does not close it.
    inner = "s = '''\n```\n'''\n"
    assert extract_code(f"~~~python\n{inner}~~~") == inner


def test_block_defining_the_entry_wins_over_a_larger_one():
    helper = "def helper():\n" + "    x = 1\n" * 20
    answer = (f"A helper:\n```python\n{helper}```\nThe kernel:\n```python\n{KERNEL}```\n"
              "Usage:\n```python\ny = softmax(x)\n```")
    assert extract_code(answer, "softmax") == KERNEL


def test_last_block_defining_the_entry_is_the_final_version():
    v2 = KERNEL.replace("-1", "dim=-1")
    answer = f"Before:\n```python\n{KERNEL}```\nAfter the fix:\n```python\n{v2}```"
    assert extract_code(answer, "softmax") == v2


def test_without_entry_the_largest_python_block():
    answer = f"```bash\npip install triton && echo a long shell line to be ignored entirely\n```\n" \
             f"```python\n{KERNEL}```\n```python\nprint(1)\n```"
    assert extract_code(answer) == KERNEL
    assert extract_code(answer, "not_defined_anywhere") == KERNEL


def test_other_languages_only_is_no_code():
    assert extract_code("Run this:\n```bash\nls -l\n```\n", "softmax") is None


def test_unterminated_fence_runs_to_the_end():
    answer = f"Here you go:\n```python\n{KERNEL}"
    assert extract_code(answer, "softmax") == KERNEL
    (block,) = code_blocks(answer)
    assert not block.closed


def test_indented_fence_in_a_list_is_dedented():
    indented = "".join(f"   {line}\n" if line else "\n" for line in KERNEL.splitlines())
    answer = f"1. Replace the file with:\n   ```python\n{indented}   ```\n2. Run the tests."
    assert extract_code(answer, "softmax") == KERNEL


def test_longer_fence_holds_shorter_ones():
    body = "doc = '''\n```python\nnot the end\n```\n'''\n" + KERNEL
    assert extract_code(f"````python\n{body}````", "softmax") == body


def test_crlf_answers():
    answer = f"Here:\r\n```python\r\n{KERNEL.replace(chr(10), chr(13) + chr(10))}```\r\n"
    assert extract_code(answer, "softmax") == KERNEL


def test_answer_without_code_is_none():
    assert extract_code("I am not sure how to make this faster; can you share a profile?", "softmax") is None
    assert extract_code("", "softmax") is None
    assert extract_code("```python\n\n```", "softmax") is None


def test_bare_python_answer_is_taken_whole():
    assert extract_code(KERNEL, "softmax") == KERNEL
    assert extract_code("x = 1 + 1", "softmax") is None  # parses, but defines nothing


def test_inline_backticks_are_not_fences():
    answer = f"```softmax``` is the entry.\n```python\n{KERNEL}```"
    assert extract_code(answer, "softmax") == KERNEL
