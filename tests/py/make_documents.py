"""make_documents.py N: N JSON Lines documents ({"text": ...}) of 3 to 40 words, deterministic, for the
documents-mode tests: lengths vary so that rows hold several documents and cut some."""
import json
import sys

WORDS = ("the light was upon the face of the deep and the earth brought forth grass herb yielding seed "
         "after his kind and the evening and the morning were the third day").split()
n = int(sys.argv[1])
for d in range(n):
    length = 3 + (d * 17 + 5) % 38
    text = " ".join(WORDS[(d * 7 + i * 3) % len(WORDS)] for i in range(length))
    print(json.dumps({"text": text.capitalize() + "."}))
