"""Few-shot evaluation time relative to one zero-shot evaluation of the same model.

The ooDML few-shot protocol (docs/fewshot.md) adapts the embedding head for 1000 (2-shot) or 1500 (5-shot)
iterations in each of 10 episodes: 25,000 optimiser steps. dmlplug computes the backbone features of the
test images once and trains only the head on them, so the whole protocol should cost little more than
one zero-shot evaluation (embed the test set, compute recall@1 and map@1000). Target: ≤ 1.5×.

Both are timed in the same process on the same model and test split of the embedded ``glyphs`` dataset
(random backbone weights: speed does not depend on them). Printed: the zero-shot time, the few-shot time
split into the one backbone pass and the adaptation/evaluation of all episodes, the ratio, and an
estimate of what recomputing the backbone for every adaptation batch would cost instead.

Run:  python benchmarks/fewshot_speed.py [--model resnet50] [--image-size 224]
      [--classes 100] [--images-per-class 30] [--episodes 10] [--iterations 2=1000,5=1500]
      [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def parse_iterations(text: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (part.split("=") for part in text.split(","))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="timm backbone")
    parser.add_argument("--image-size", type=int, default=224, help="network input size")
    parser.add_argument("--glyph-size", type=int, default=64, help="rendered glyph size (upscaled to the input)")
    parser.add_argument("--classes", type=int, default=100, help="test classes")
    parser.add_argument("--images-per-class", type=int, default=30)
    parser.add_argument("--embedding", type=int, default=512)
    parser.add_argument("--shots", default="2,5")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--iterations", default="2=1000,5=1500")
    parser.add_argument("--batch-size", type=int, default=112)
    parser.add_argument("--eval-batch-size", type=int, default=128)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--project-images", type=int, default=0,
                        help="also project the times to this many test images (CUB200: 5924, CARS196: 8131)")
    parser.add_argument("--project-episodes", type=int, default=10)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import dmlplug
    from dmlplug.data.transforms import build_transform

    # The zero-shot side is the engine's own evaluation path (what a run does every epoch).
    from dmlplug.engine.data import TransformedSource, embed_loader, eval_loader
    from dmlplug.engine.model import EmbeddingModel
    from dmlplug_builtins.oodml import FewShotSettings
    from dmlplug_builtins.oodml.fewshot import retrieval_metrics, run_fewshot

    bundle = dmlplug.create("dataset", "glyphs", num_classes=2 * args.classes,
                            images_per_class=args.images_per_class, image_size=args.glyph_size)
    test = bundle.test
    backbone = dmlplug.create("backbone", "timm", model=args.model, device=args.device)
    head = dmlplug.create("head", "linear", embedding_size=args.embedding, feature_dim=int(backbone.num_features),
                          device=args.device)
    model = EmbeddingModel(backbone, head).to(args.device).eval()
    transform = build_transform("test", augment="light", image_size=args.image_size)

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    # Warm-up (first-call allocations, cuDNN autotuning) on a few images, outside the timings.
    warm = eval_loader(TransformedSource(test.subset(np.arange(min(len(test), args.eval_batch_size))), transform),
                       batch_size=args.eval_batch_size, workers=0, device=args.device)
    embed_loader(model, warm, args.device)
    sync()

    start = time.perf_counter()
    loader = eval_loader(TransformedSource(test, transform), batch_size=args.eval_batch_size, workers=0,
                         device=args.device)
    embeddings, labels = embed_loader(model, loader, args.device)
    zero_metrics = retrieval_metrics(embeddings, labels)
    sync()
    zero_time = time.perf_counter() - start

    settings = FewShotSettings(shots=[int(k) for k in args.shots.split(",")], episodes=args.episodes,
                               iterations=parse_iterations(args.iterations), batch_size=args.batch_size)
    start = time.perf_counter()
    report = run_fewshot(model, test, transform, settings, device=args.device, eval_batch_size=args.eval_batch_size)
    sync()
    few_time = time.perf_counter() - start
    feature_time = report.info["feature_seconds"]

    steps = sum(settings.iterations_for(k) * len(report.episodes[k]) for k in settings.shots)
    per_image = feature_time / len(test)
    naive = steps * min(args.batch_size, args.classes * 2) * per_image + few_time - feature_time
    print(f"device {args.device}, {args.model} at {args.image_size}px, {len(test)} test images "
          f"({test.num_classes} classes), torch threads {torch.get_num_threads()}")
    print(f"zero-shot evaluation (embed + recall@1/map@1000):      {zero_time:9.2f} s  "
          f"(recall@1 {zero_metrics['recall@1']:.4f})")
    print(f"few-shot protocol, {steps} adaptation steps in "
          f"{sum(len(r) for r in report.episodes.values())} episodes: {few_time:9.2f} s")
    print(f"  of which the one backbone pass over the test set:     {feature_time:9.2f} s")
    print(f"  adaptation + zero-shot/adapted metrics of all episodes: {few_time - feature_time:9.2f} s")
    print(f"ratio few-shot / zero-shot: {few_time / zero_time:.2f}x (target <= 1.5x)")
    print(f"estimate with the backbone recomputed for every adaptation batch: {naive:.0f} s "
          f"({naive / zero_time:.0f}x zero-shot)")
    if args.project_images:
        # Both sides are linear in their sizes: backbone time per image, adaptation time per step.
        episodes = sum(len(r) for r in report.episodes.values())
        per_step = (few_time - feature_time) / steps
        full_steps = sum(settings.iterations_for(k) for k in settings.shots) * args.project_episodes
        zero_full = per_image * args.project_images + (zero_time - feature_time)
        few_full = per_image * args.project_images + per_step * full_steps
        print(f"projection to {args.project_images} test images and {args.project_episodes} episodes per shot "
              f"count ({full_steps} steps; {per_image * 1000:.1f} ms/image, {per_step * 1000:.1f} ms/step incl. "
              f"episode metrics; measured over {episodes} episodes): zero-shot {zero_full:.0f} s, few-shot "
              f"{few_full:.0f} s, ratio {few_full / zero_full:.2f}x")


if __name__ == "__main__":
    main()
