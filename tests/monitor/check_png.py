#!/usr/bin/env python3
"""check_png.py FILE.png COLOR...: the rendered plot is not blank (> 2% of its pixels differ from
the two background greys) and every run colour (#rrggbb) is drawn (>= 150 pixels near it)."""
import sys

from PIL import Image

img = Image.open(sys.argv[1]).convert("RGB")
pixels = list(img.getdata())
background = {(0xF7, 0xF7, 0xF7), (0xFF, 0xFF, 0xFF)}
ink = sum(1 for p in pixels if p not in background)
print(f"{img.size[0]}x{img.size[1]}, {ink} non-background pixels ({100.0 * ink / len(pixels):.1f}%)")
ok = ink > 0.02 * len(pixels)
for color in sys.argv[2:]:
    c = tuple(int(color.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    near = sum(1 for p in pixels if sum(abs(a - b) for a, b in zip(p, c)) < 60)
    print(f"{color}: {near} pixels")
    ok = ok and near >= 150
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
