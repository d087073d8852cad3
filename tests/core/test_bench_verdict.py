"""bench's verdict (core.precision.verdict) on recorded timings of each kind of step.

The GPU figures are shaped like those measured on an H100 (issue 29): BERT-base 32x256, whose
half-precision step leaves the GPU idle while Python enqueues kernels, and a 1.1B Llama, whose
8x256 step is matmuls and whose 1-token step is reading the weights. Peaks are the H100 SXM's.
"""

from fp16studio.core.precision.verdict import Step, bound, judge, misaligned

H100 = {"peak_gb_per_s": 3350.0}
HALF_PEAK, FP32_PEAK = 989.0, 67.0
GPU_WORDS = ("GPU", "CUDA", "launch", "tensor-core", "torch.compile")


def bert_base():
    """float32 36.3 ms a step, the GPU busy 36 ms of it; float16 8.7 ms, busy 2.9 ms."""
    flops, weights = 2 * 110e6 * 32 * 256, 440e6
    return [Step("float32", wall_ms=36.3, busy_ms=36.0, flops=flops, bytes=weights + 1.5e9,
                 peak_tflops=FP32_PEAK, **H100),
            Step("float16", wall_ms=8.7, busy_ms=2.9, flops=flops, bytes=weights / 2 + 0.75e9,
                 peak_tflops=HALF_PEAK, **H100)]


def test_a_launch_bound_half_step_says_what_would_turn_its_faster_kernels_into_speed():
    figures, overall = judge(bert_base(), "cuda", gemm_dims=(768, 3072))
    fp16 = figures["float16"]
    assert fp16["bound"] == "launch" and fp16["busy_ms"] == 2.9
    assert fp16["overhead_ms"] == 8.7 - 2.9
    assert round(fp16["kernel_speedup"], 1) == 12.4  # 36.0 / 2.9
    assert "4.17x float32's speed" in fp16["verdict"] and "33% of each step" in fp16["verdict"]
    for remedy in ("a larger batch", "CUDA graphs", "torch.compile"):
        assert remedy in fp16["verdict"] and remedy in overall
    assert overall.startswith("float16 pays: 4.17x") and "launch-bound" in overall
    assert figures["float32"]["bound"] == "math" and figures["float32"]["kernel_speedup"] == 1.0


def test_half_precision_that_does_not_pay_because_of_launches_says_so():
    steps = [Step("float32", wall_ms=10.0, busy_ms=6.0), Step("bfloat16", wall_ms=9.8, busy_ms=2.0)]
    figures, overall = judge(steps, "cuda")
    assert figures["bfloat16"]["bound"] == "launch"
    assert overall.startswith("Half precision does not pay here: the fastest, bfloat16, runs 1.02x")
    assert "launch-bound" in overall and "3.00x" in overall  # the kernels alone


def llama_1b(tokens, wall_fp32, busy_fp32, wall_half, busy_half):
    flops, weights = 2 * 1.1e9 * tokens, 4.4e9
    return [Step("float32", wall_ms=wall_fp32, busy_ms=busy_fp32, flops=flops, bytes=weights,
                 peak_tflops=FP32_PEAK, **H100),
            Step("bfloat16", wall_ms=wall_half, busy_ms=busy_half, flops=flops,
                 bytes=weights / 2, peak_tflops=HALF_PEAK, **H100)]


def test_a_step_that_reads_the_weights_is_memory_bound():
    """One token: 2.2 GB of bfloat16 weights in 0.95 ms is 69% of 3.35 TB/s; 4.4 GFLOP of 989
    TFLOP/s is nothing."""
    figures, overall = judge(llama_1b(2, 1.9, 1.85, 1.0, 0.95), "cuda")
    assert figures["bfloat16"]["bound"] == figures["float32"]["bound"] == "memory"
    assert "69% of the GPU's bandwidth" in figures["bfloat16"]["verdict"]
    assert overall.startswith("bfloat16 pays: 1.90x")


def test_a_matmul_step_is_math_bound_and_names_dimensions_the_tensor_cores_dislike():
    steps = llama_1b(8 * 256, 108.0, 107.0, 16.8, 16.0)
    figures, _ = judge(steps, "cuda", gemm_dims=(2048, 5632, 32001))
    half = figures["bfloat16"]
    assert half["bound"] == "math" and "28% of the GPU's bfloat16 peak" in half["verdict"]
    assert "32001" in half["verdict"] and "multiples of 8" in half["verdict"]
    assert "multiples" not in figures["float32"]["verdict"]  # a float32 GEMM has no such rule
    assert misaligned((2048, 5632, 32001, 30522)) == [30522, 32001]
    aligned, _ = judge(steps, "cuda", gemm_dims=(2048, 5632, 32000))
    assert "multiples" not in aligned["bfloat16"]["verdict"]


def test_without_the_gpus_peaks_the_bound_is_unknown_but_the_busy_share_is_said():
    step = Step("float16", wall_ms=10.0, busy_ms=9.0, flops=1e12, bytes=1e9)
    assert bound(step) is None
    figures, _ = judge([Step("float32", wall_ms=20.0, busy_ms=19.0), step], "cuda")
    assert "busy 90% of each step" in figures["float16"]["verdict"]


def test_on_a_cpu_the_verdict_is_about_the_cpu_and_never_a_gpus():
    steps = [Step("float32", wall_ms=100.0), Step("float16", wall_ms=400.0, support="emulated"),
             Step("bfloat16", wall_ms=50.0),
             Step("autocast-bfloat16", wall_ms=130.0)]
    figures, overall = judge(steps, "cpu", threads=2)
    assert all(f["bound"] is f["busy_ms"] is f["kernel_speedup"] is None for f in figures.values())
    for text in [overall] + [f["verdict"] for f in figures.values()]:
        assert "this CPU (2 threads)" in text and not any(w in text for w in GPU_WORDS), text
    assert "no native float16 kernels" in figures["float16"]["verdict"]
    assert "autocast casts around each operator" in figures["autocast-bfloat16"]["verdict"]
    assert "2.00x float32's speed" in figures["bfloat16"]["verdict"]
    assert overall.startswith("On this CPU (2 threads) bfloat16 is the fastest at 2.00x")
    slow, overall = judge(steps[:2], "cpu", threads=2)
    assert overall.startswith("Half precision does not pay on this CPU (2 threads)")


def test_without_float32_there_is_nothing_to_compare_with():
    figures, overall = judge([Step("float16", wall_ms=1.0, busy_ms=0.9)], "cuda")
    assert overall == "No float32 figure to compare with."
    assert figures["float16"]["kernel_speedup"] is None
    assert judge([], "cpu")[1].startswith("Nothing ran")


def test_a_verdict_resting_on_a_figure_that_moved_between_rounds_ranks_nothing():
    """Issue 43: the first sentence says the figures are not stable enough to rank, with the
    spread, and names no winner and no x-figure."""
    steps = [Step("float32", wall_ms=180.0, spread=0.05), Step("float16", wall_ms=190.0),
             Step("autocast-float16", wall_ms=14.0, spread=0.26)]
    _, overall = judge(steps, "cpu", threads=2)
    first = overall.split(". ")[0]
    assert first.startswith("The figures on this CPU (2 threads) are not stable enough to rank: "
                            "autocast-float16 varied 26%")
    assert "fastest" not in overall and "x float32" not in overall and "pays" not in overall
    steps[0] = Step("float32", wall_ms=180.0, spread=140.65)
    both = judge(steps, "cpu", threads=2)[1]
    assert "float32 and autocast-float16 varied 14,065% and 26% between rounds" in both
    gpu = [Step("float32", wall_ms=36.3, busy_ms=36.0, spread=0.3),
           Step("float16", wall_ms=8.7, busy_ms=2.9)]
    assert judge(gpu, "cuda")[1].startswith("The figures are not stable enough to rank: float32")
    # A variant the verdict does not compare may be unsteady: the verdict stands as it is.
    steps[:] = [Step("float32", wall_ms=180.0), Step("float16", wall_ms=190.0, spread=0.5),
                Step("autocast-float16", wall_ms=14.0)]
    assert judge(steps, "cpu", threads=2)[1].startswith(
        "On this CPU (2 threads) autocast-float16 is the fastest at 12.86x")


def test_a_variant_whose_output_is_not_finite_is_judged_on_that_never_on_its_speed():
    """Issue 44 class 7: twice float32's speed with 12 NaN outputs is no praise and no crown."""
    steps = [Step("float32", wall_ms=20.0), Step("bfloat16", wall_ms=15.0),
             Step("autocast-float16", wall_ms=10.0, nonfinite=12)]
    figures, overall = judge(steps, "cpu", threads=2)
    assert figures["autocast-float16"]["verdict"].startswith(
        "autocast-float16's output holds 12 inf/NaN values")
    assert "float32's speed" not in figures["autocast-float16"]["verdict"]
    assert overall.startswith("autocast-float16 is not ranked: its output holds inf/NaN values.")
    assert "bfloat16 is the fastest at 1.33x" in overall
    # Every half variant broken: nothing is ranked; on a GPU as on a CPU.
    gpu = [Step("float32", wall_ms=36.3, busy_ms=36.0),
           Step("float16", wall_ms=8.7, busy_ms=2.9, nonfinite=3)]
    figures, overall = judge(gpu, "cuda")
    assert overall == "float16 is not ranked: its output holds inf/NaN values."
    assert figures["float16"]["kernel_speedup"] is None
    # float32 itself broken: nothing is judged against it.
    steps[0] = Step("float32", wall_ms=20.0, nonfinite=4)
    figures, overall = judge(steps, "cpu", threads=2)
    assert overall.startswith("float32's own output holds 4 inf/NaN values, so no variant is ranked")
    assert "x float32" not in figures["bfloat16"]["verdict"]
