"""Render a run's report.html in headless Chromium and check the screenshot is not blank.

    python bench/render_report.py runs/demo [--screenshot shot.png] [--rebuild]

Prints the screenshot's figures (size, distinct colours, fraction of non-white pixels) and exits
1 if the page looks blank, 2 if it cannot run (no report, no Chromium). `--rebuild` first
rebuilds the reports from the run's results.sqlite (`agentloop report DIR`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MIN_COLOURS = 64
"""A rendered report has text, table stripes and plots: many colours. A blank page has one."""
MIN_INK = 0.01
"""Fraction of pixels that are not (near) white."""


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def screenshot(browser: str, html: Path, png: Path, size: str = "1280,2000") -> None:
    """Render `html` to `png` with a throwaway profile, no network and no first-run UI."""
    with tempfile.TemporaryDirectory(prefix="render-report-") as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={png}",
               f"--window-size={size}", html.resolve().as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if not png.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{browser} wrote no screenshot (exit {done.returncode}): {tail[0]}")


def ink_figures(png: Path) -> dict[str, float]:
    """Size, distinct colours and the fraction of pixels darker than near-white."""
    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 24) or []
    grey = image.convert("L")
    inked = sum(count for value, count in enumerate(grey.histogram()) if value < 245)
    return {"width": image.width, "height": image.height, "colours": len(colours),
            "ink": inked / (image.width * image.height)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run directory holding report.html")
    parser.add_argument("--screenshot", type=Path,
                        help="where to keep the PNG (default: DIR/report_screenshot.png)")
    parser.add_argument("--window-size", default="1280,2000", help="browser window, WIDTH,HEIGHT px")
    parser.add_argument("--rebuild", action="store_true",
                        help="rebuild the reports from results.sqlite first")
    args = parser.parse_args()
    if args.rebuild:
        from agentloop.results.report import ReportError, write_reports

        try:
            write_reports(args.run_dir)
        except ReportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    html = args.run_dir / "report.html"
    if not html.is_file():
        print(f"error: {html} does not exist; run `agentloop report {args.run_dir}` first", file=sys.stderr)
        return 2
    browser = find_browser()
    if browser is None:
        print("error: no Chromium found; install it (Debian/Ubuntu: apt-get install -y chromium)",
              file=sys.stderr)
        return 2
    png = args.screenshot or args.run_dir / "report_screenshot.png"
    png.unlink(missing_ok=True)
    try:
        screenshot(browser, html, png, args.window_size)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    figures = ink_figures(png)
    blank = figures["colours"] < MIN_COLOURS or figures["ink"] < MIN_INK
    print(f"screenshot {png}: {figures['width']}x{figures['height']} px, {figures['colours']} colours, "
          f"{figures['ink']:.1%} non-white pixels -> {'BLANK' if blank else 'not blank'}")
    return 1 if blank else 0


if __name__ == "__main__":
    sys.exit(main())
