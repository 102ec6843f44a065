#!/usr/bin/env python3
"""Writes the ```cpp block of a Markdown file that starts with `// example: NAME`
to OUTPUT, so documentation examples are compiled exactly as written.

Usage: extract_example.py MARKDOWN NAME OUTPUT
"""
import re
import sys


def main() -> int:
    markdown, name, output = sys.argv[1:4]
    text = open(markdown, encoding="utf-8").read()
    for block in re.findall(r"```cpp\n(.*?)```", text, flags=re.S):
        if block.startswith(f"// example: {name}\n"):
            with open(output, "w", encoding="utf-8") as out:
                out.write(block)
            return 0
    print(f"{markdown}: no ```cpp block starting with '// example: {name}'", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
