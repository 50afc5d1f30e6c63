"""Verdicts on TensorFlow memory problems shaped like the ones users report.

Each case is a pattern from TensorFlow's issue tracker, written with the public API a user
would call (``leakwidget.watch(step, setup=...)`` with the default budget), run in a fresh
process with real TensorFlow on the CPU. The table shows what leakwidget said, how long it
took, the slope, the attribution, and what the pattern is known to do on this TensorFlow.

    python bench/bench_tf_cases.py [--only NAME ...] [--seconds S]

"verdict" is what the result's headline reads: the verdict's kind, or "retention" for a leak
verdict whose growth is garbage or memory the allocator keeps ("Growing, but not a leak of your
code"), "unsettled" when what the heap keeps past such garbage is not yet told; "ok" is "open"
for an answer not given (inconclusive, unsettled).

"expected" is what the pattern does on this TensorFlow, measured independently with a plain
loop printing RSS, run far longer than the watch: "leak" keeps growing, "no leak" (stable or
plateau) stops. Several reported leaks are fixed in TF 2.21; the right verdict for them here
is "no leak".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time

# name -> (expected verdict, what the case is, setup source, step source). The setup source
# defines `setup()` and the step source `step(state)`.
CASES: dict[str, tuple[str, str, str, str]] = {
    "from_generator_rebuilt": (
        "leak",
        "a new Dataset.from_generator per iteration, iterated to the end (#37653, #123269)",
        """
        def setup():
            def gen():
                for i in range(8):
                    yield np.full(256, i, np.float32)
            return gen
        """,
        """
        def step(gen):
            ds = tf.data.Dataset.from_generator(
                gen, output_signature=tf.TensorSpec((256,), tf.float32))
            for _ in ds:
                pass
        """,
    ),
    "from_generator_iterated": (
        "no leak",
        "next() on one long-lived from_generator iterator, Python 3.11 (#65675, #60659);"
        " fixed by TF 2.21: +1 MiB over 400,000 calls",
        """
        def setup():
            def gen():
                while True:
                    yield np.random.rand(32, 1, 10).astype(np.float32)
            ds = tf.data.Dataset.from_generator(
                gen, output_signature=tf.TensorSpec((32, 1, 10), tf.float32))
            return iter(ds)
        """,
        """
        def step(it):
            next(it)
        """,
    ),
    "shuffle_reiterated": (
        "no leak",
        "a full pass over a shuffled dataset per iteration, new iterator each time (#44176);"
        " on TF 2.21 +22 MiB over the first 500 passes, then flat for 7,500",
        """
        def setup():
            data = np.random.rand(2000, 1024).astype(np.float32)
            return tf.data.Dataset.from_tensor_slices(data).shuffle(2000).batch(100)
        """,
        """
        def step(ds):
            for _ in ds:
                pass
        """,
    ),
    "cached_reiterated": (
        "leak",
        "a full pass over a cached dataset per iteration, a new iterator each time: TF 2.21 keeps"
        " ~0.6-0.8 KiB per pass (malloc's bytes in use and RSS alike, linear over 18,000 passes"
        " of Dataset.range(10)), behind the cache's 7 MiB fill",
        """
        def setup():
            return (tf.data.Dataset.range(3000)
                    .map(lambda i: tf.fill([256], tf.cast(i, tf.float32))).cache().batch(50))
        """,
        """
        def step(ds):
            for _ in ds:
                pass
        """,
    ),
    "retracing_python_scalar": (
        "leak",
        "a tf.function called with a new Python int each time: one new trace per call",
        """
        def setup():
            @tf.function
            def f(x, n):
                return x * n
            return {"f": f, "i": 0, "x": tf.ones((16,))}
        """,
        """
        def step(s):
            s["i"] += 1
            s["f"](s["x"], s["i"])
        """,
    ),
    "fixed_pipeline_iterated": (
        "no leak",
        "next() on one long-lived iterator of from_tensor_slices -> map -> batch -> repeat",
        """
        def setup():
            ds = (tf.data.Dataset.from_tensor_slices(np.random.rand(512, 64).astype(np.float32))
                  .map(lambda x: x * 2.0, num_parallel_calls=tf.data.AUTOTUNE)
                  .batch(32).repeat().prefetch(tf.data.AUTOTUNE))
            return iter(ds)
        """,
        """
        def step(it):
            next(it)
        """,
    ),
    "tensor_slices_rebuilt": (
        "no leak",
        "a new from_tensor_slices -> shuffle -> batch per iteration, first batch taken (#20436);"
        " on TF 2.21 RSS moves between two levels one data copy apart for 12,000 iterations",
        """
        def setup():
            return np.zeros((2000, 32, 32, 3), np.float32)
        """,
        """
        def step(data):
            ds = tf.data.Dataset.from_tensor_slices(data).shuffle(1000).batch(128)
            next(iter(ds))
        """,
    ),
    "cache_first_epoch": (
        "plateau",
        "cache() filling during the first pass over 600 elements of 64 KiB, then served",
        """
        def setup():
            ds = (tf.data.Dataset.range(600)
                  .map(lambda i: tf.fill((16384,), tf.cast(i, tf.float32)))
                  .cache().repeat())
            return iter(ds)
        """,
        """
        def step(it):
            next(it)
        """,
    ),
    "keras_predict_loop": (
        "leak",
        "model.predict on a small batch, called in a loop (#44711, #33030); on TF 2.21 +12 MiB"
        " over 1,250 calls, still growing: garbage in reference cycles that only a full"
        " collection frees (+1.6 MiB over the same calls with gc.collect() every 250)",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(64),
                                     tf.keras.layers.Dense(1)])
            return m, np.random.rand(32, 10).astype(np.float32)
        """,
        """
        def step(s):
            s[0].predict(s[1], verbose=0)
        """,
    ),
    "keras_model_rebuilt": (
        "leak",
        "a new Keras model built and called per iteration, no clear_session (#33030 style);"
        " on TF 2.21 +420 MiB over 3,000 builds, Python objects flat (native)",
        """
        def setup():
            return np.random.rand(8, 10).astype(np.float32)
        """,
        """
        def step(x):
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(32),
                                     tf.keras.layers.Dense(1)])
            m(x)
        """,
    ),
    "python_list_of_batches": (
        "leak",
        "the user's loop keeps every batch's numpy copy in a list (history of outputs)",
        """
        def setup():
            ds = tf.data.Dataset.from_tensor_slices(np.random.rand(256, 4096)).batch(8).repeat()
            return {"it": iter(ds), "kept": []}
        """,
        """
        def step(s):
            s["kept"].append(next(s["it"]).numpy())
        """,
    ),
    "py_function_map_rebuilt": (
        "leak",
        "a new dataset with map(tf.py_function) per iteration",
        """
        def setup():
            def double(x):
                return x * 2
            return double
        """,
        """
        def step(double):
            ds = tf.data.Dataset.range(4).map(
                lambda x: tf.py_function(double, [x], tf.int64))
            for _ in ds:
                pass
        """,
    ),
    "keras_fit_repeated": (
        "leak",
        "model.fit on the same small arrays, called in a loop (#37505, #31312); on TF 2.21 +17 MiB over 1,200 calls, still growing ~15 KiB a call",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(32), tf.keras.layers.Dense(1)])
            m.compile("adam", "mse")
            return m, np.random.rand(64, 10).astype(np.float32), np.random.rand(64, 1).astype(np.float32)
        """,
        """
        def step(s):
            s[0].fit(s[1], s[2], epochs=1, batch_size=32, verbose=0)
        """,
    ),
    "tf_function_made_per_call": (
        "leak",
        "a new tf.function made and called per iteration (#27468); on TF 2.21 +9 MiB over 11,500, still growing ~0.8 KiB a call",
        """
        def setup():
            return tf.ones((16,))
        """,
        """
        def step(x):
            f = tf.function(lambda v: v * 2.0 + 1.0)
            f(x)
        """,
    ),
    "keras_model_rebuilt_cleared": (
        "no leak",
        "a new Keras model per iteration after clear_session() (the fix of keras_model_rebuilt); flat over 480 builds",
        """
        def setup():
            return np.random.rand(8, 10).astype(np.float32)
        """,
        """
        def step(x):
            tf.keras.backend.clear_session()
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(32), tf.keras.layers.Dense(1)])
            m(x)
        """,
    ),
    "keras_evaluate_loop": (
        "leak",
        "model.evaluate on a small batch, called in a loop (#33030 style); on TF 2.21 +19 MiB over 1,170 calls, still growing",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
            m.compile("adam", "mse")
            return m, np.random.rand(32, 10).astype(np.float32), np.random.rand(32, 1).astype(np.float32)
        """,
        """
        def step(s):
            s[0].evaluate(s[1], s[2], verbose=0)
        """,
    ),
    "model_call_loop": (
        "no leak",
        "model(x, training=False) called in a loop (what #44711's answers recommend over predict); flat over 49,000 calls",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
            return m, tf.constant(np.random.rand(32, 10).astype(np.float32))
        """,
        """
        def step(s):
            s[0](s[1], training=False)
        """,
    ),
    "gradient_tape_train_step": (
        "no leak",
        "a tf.function training step with GradientTape and Adam, called in a loop; +1.4 MiB over 225,000 steps",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
            opt = tf.keras.optimizers.Adam()
            x = tf.constant(np.random.rand(32, 10).astype(np.float32)); y = tf.constant(np.random.rand(32, 1).astype(np.float32))
            @tf.function
            def train(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((m(x, training=True) - y) ** 2)
                opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
                return loss
            return train, x, y
        """,
        """
        def step(s):
            s[0](s[1], s[2])
        """,
    ),
    "interleave_reiterated": (
        "leak",
        "a parallel interleave -> batch -> prefetch pipeline iterated to its end per iteration; on TF 2.21 +18 MiB over 24,700 passes, growing ~0.8 KiB a pass after the first 3,000",
        """
        def setup():
            return (tf.data.Dataset.range(8)
                    .interleave(lambda i: tf.data.Dataset.from_tensors(tf.fill((1024,), tf.cast(i, tf.float32))).repeat(16),
                                cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE)
                    .batch(16).prefetch(2))
        """,
        """
        def step(ds):
            for _ in ds:
                pass
        """,
    ),
    "random_normal_loop": (
        "no leak",
        "tf.random.normal of a 256x256 tensor per iteration; malloc's bytes in use +0.09 B a call"
        " over 20,000 calls (RSS flat over 17,000 in a plain loop)",
        """
        def setup():
            return [256, 256]
        """,
        """
        def step(shape):
            tf.random.normal(shape)
        """,
    ),
    "iterator_made_per_step": (
        "leak",
        "next(iter(ds.take(1))) on a fixed dataset per iteration; malloc's bytes in use +232 B a"
        " call over 8,000 calls with gc.collect() every 200",
        """
        def setup():
            return tf.data.Dataset.range(10**6).map(lambda v: v * 2)
        """,
        """
        def step(ds):
            next(iter(ds.take(1)))
        """,
    ),
    "fixed_dataset_reiterated": (
        "leak",
        "for b in ds over one small fixed dataset per iteration; malloc's bytes in use +820 B a"
        " pass over 4,000 passes with gc.collect() every 200",
        """
        def setup():
            return tf.data.Dataset.range(100).map(lambda v: tf.cast(v, tf.float32) * 2).batch(10)
        """,
        """
        def step(ds):
            for _ in ds:
                pass
        """,
    ),
    "random_uniform_seeded": (
        "leak",
        "tf.random.uniform with a new op-level seed per call; malloc's bytes in use +36 KiB a call"
        " over 25,000 calls (gc.collect() every 200)",
        """
        def setup():
            return [0]
        """,
        """
        def step(c):
            c[0] += 1
            tf.random.uniform([10], seed=c[0])
        """,
    ),
    "numpy_function_map_rebuilt": (
        "leak",
        "a Dataset.map of tf.numpy_function built per iteration; malloc's bytes in use +958 B a"
        " call over 1,750 calls",
        """
        def setup():
            return None
        """,
        """
        def step(_):
            ds = tf.data.Dataset.range(8).map(
                lambda x: tf.numpy_function(lambda v: v * 2, [x], tf.int64))
            for _ in ds:
                pass
        """,
    ),
    "predict_on_dataset": (
        "no leak",
        "Model.predict on one tf.data dataset per call; malloc's bytes in use +0.4 B a call over"
        " 6,600 calls",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(16),
                                     tf.keras.layers.Dense(1)])
            ds = tf.data.Dataset.from_tensor_slices(
                np.random.rand(64, 10).astype("float32")).batch(32)
            return m, ds
        """,
        """
        def step(s):
            s[0].predict(s[1], verbose=0)
        """,
    ),
    "constant_from_numpy": (
        "no leak",
        "tf.constant of a 256x256 NumPy array per call; +0.05 B a call over 49,600 calls",
        """
        def setup():
            return np.random.rand(256, 256)
        """,
        """
        def step(a):
            tf.constant(a) * 2
        """,
    ),
    "string_lookup_adapt": (
        "leak",
        "a keras StringLookup made and adapted per call; +112 KiB a call over 9,200 calls",
        """
        def setup():
            return np.array([str(i % 50) for i in range(500)])
        """,
        """
        def step(d):
            layer = tf.keras.layers.StringLookup()
            layer.adapt(d)
        """,
    ),
    "window_flat_map_rebuilt": (
        "leak",
        "Dataset.window(4).flat_map(...) built per iteration; malloc's bytes in use +1,000 B,"
        " pymalloc blocks +1.1 and tracked objects +0.0 a call over 2,000 calls: native",
        """
        def setup():
            return None
        """,
        """
        def step(_):
            ds = tf.data.Dataset.range(32).window(4).flat_map(lambda w: w.batch(4))
            for _ in ds:
                pass
        """,
    ),
    "variable_per_call": (
        "no leak",
        "a tf.Variable made and assigned per call; +0.04 B a call over 45,800 calls",
        """
        def setup():
            return None
        """,
        """
        def step(_):
            v = tf.Variable(tf.zeros([64, 64]))
            v.assign_add(tf.ones([64, 64]))
        """,
    ),
    "optimizer_per_call": (
        "leak",
        "a keras Adam optimizer made per call and applied once; +145 KiB a call over 5,100 calls",
        """
        def setup():
            return tf.Variable(tf.zeros([64]))
        """,
        """
        def step(v):
            opt = tf.keras.optimizers.Adam()
            opt.apply_gradients([(tf.ones([64]), v)])
        """,
    ),
    "tf_function_new_shape": (
        "leak",
        "a tf.function called with a tensor of a new shape each call (no input_signature); malloc's bytes in use +112 KiB a call over 2,600 calls",
        """
        def setup():
            @tf.function
            def f(x):
                return tf.reduce_sum(x * 2)
            return [0, f]
        """,
        """
        def step(s):
            s[0] += 1
            s[1](tf.zeros([s[0]]))
        """,
    ),
    "checkpoint_write_per_call": (
        "no leak",
        "tf.train.Checkpoint(v=...).write(path) per call; +0.0 B a call over 13,000 calls",
        """
        import tempfile, os
        def setup():
            return tf.Variable(tf.zeros([256])), os.path.join(tempfile.mkdtemp(), "ckpt")
        """,
        """
        def step(s):
            tf.train.Checkpoint(v=s[0]).write(s[1])
        """,
    ),
    "train_on_batch_loop": (
        "no leak",
        "keras Model.train_on_batch per call; +0.2 B a call over 25,900 calls",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1)])
            m.compile("adam", "mse")
            return m, np.random.rand(32, 10).astype("float32"), np.random.rand(32, 1).astype("float32")
        """,
        """
        def step(s):
            s[0].train_on_batch(s[1], s[2])
        """,
    ),
    "predict_on_batch_loop": (
        "no leak",
        "keras Model.predict_on_batch per call; +0.1 B a call over 37,200 calls",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1)])
            return m, np.random.rand(32, 10).astype("float32")
        """,
        """
        def step(s):
            s[0].predict_on_batch(s[1])
        """,
    ),
    "saved_model_save_per_call": (
        "no leak",
        "tf.saved_model.save of a tf.Module per call; +3 B a call over 1,500 calls (RSS climbs with garbage between Python's collections)",
        """
        import tempfile, os
        def setup():
            class M(tf.Module):
                def __init__(self):
                    self.v = tf.Variable(tf.ones([16]))
                @tf.function(input_signature=[tf.TensorSpec([None, 16])])
                def __call__(self, x):
                    return x * self.v
            return M(), tempfile.mkdtemp()
        """,
        """
        def step(s):
            tf.saved_model.save(s[0], s[1])
        """,
    ),
    "module_method_per_instance": (
        "no leak",
        "a tf.Module whose @tf.function __call__ runs on a new instance each call; +42 B a call over 7,350 calls, under a block (retracing garbage)",
        """
        def setup():
            class Scaler(tf.Module):
                @tf.function
                def __call__(self, x):
                    return x * 3.0
            return Scaler
        """,
        """
        def step(Scaler):
            Scaler()(tf.ones([8]))
        """,
    ),
    "image_resize_varied": (
        "no leak",
        "eager tf.image.resize to a size that changes each call; +0.06 B a call over 54,000 calls",
        """
        def setup():
            return [0, tf.random.uniform([64, 64, 3])]
        """,
        """
        def step(s):
            s[0] += 1
            tf.image.resize(s[1], [32 + s[0] % 64, 32 + s[0] % 48])
        """,
    ),
    "fit_dataset_epoch_loop": (
        "no leak",
        "keras Model.fit(dataset, epochs=1) per call on one dataset; +1.3 B a call over 3,600 calls",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1)])
            m.compile("adam", "mse")
            ds = tf.data.Dataset.from_tensor_slices((np.random.rand(64, 10).astype("float32"), np.random.rand(64, 1).astype("float32"))).batch(32)
            return m, ds
        """,
        """
        def step(s):
            s[0].fit(s[1], epochs=1, verbose=0)
        """,
    ),
    "predict_varied_batch": (
        "leak",
        "keras Model.predict per call on a batch of 1-97 rows; malloc's bytes in use +1.0 KiB and 3.2 blocks a call over 1,630 calls (gc.collect() every 25)",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1)])
            return [0, m]
        """,
        """
        def step(s):
            s[0] += 1
            s[1].predict(np.random.rand(1 + s[0] % 97, 10).astype("float32"), verbose=0)
        """,
    ),
    "py_function_map_fixed": (
        "leak",
        "one Dataset.map of tf.py_function, iterated again each step; +1,002 B a call over 3,700 calls",
        """
        def setup():
            ds = tf.data.Dataset.range(16).map(lambda x: tf.py_function(lambda v: v * 2, [x], tf.int64))
            return ds
        """,
        """
        def step(ds):
            for _ in ds:
                pass
        """,
    ),
    "sample_from_datasets_rebuilt": (
        "leak",
        "Dataset.sample_from_datasets of two ranges built and iterated per call; +1.2 KiB a call over 1,570 calls",
        """
        def setup():
            return None
        """,
        """
        def step(_):
            a = tf.data.Dataset.range(8)
            b = tf.data.Dataset.range(8, 16)
            for _ in tf.data.Dataset.sample_from_datasets([a, b], seed=1):
                pass
        """,
    ),
    "text_vectorization_adapt": (
        "leak",
        "a keras TextVectorization made and adapted per call; +112 KiB a call over 5,900 calls",
        """
        def setup():
            return np.array(["the cat sat %d" % (i % 40) for i in range(200)])
        """,
        """
        def step(d):
            layer = tf.keras.layers.TextVectorization(max_tokens=100)
            layer.adapt(d)
        """,
    ),
    "decode_png_loop": (
        "no leak",
        "eager tf.image.decode_png of one 64x64 PNG per call; +0.05 B a call over 48,800 calls",
        """
        def setup():
            return tf.io.encode_png(tf.cast(tf.random.uniform([64, 64, 3], 0, 255), tf.uint8))
        """,
        """
        def step(png):
            tf.image.decode_png(png).numpy()
        """,
    ),
    "tensor_slices_partial_iter": (
        "leak",
        "an iterator over a shuffled, batched from_tensor_slices made per call, one batch taken; +271 B a call over 3,400 calls, RSS falling",
        """
        def setup():
            return np.random.rand(2000, 32).astype("float32")
        """,
        """
        def step(a):
            it = iter(tf.data.Dataset.from_tensor_slices(a).shuffle(100).batch(16))
            next(it)
        """,
    ),
    "gradient_tape_kept_grads": (
        "leak",
        "a GradientTape's 128x128 gradient appended to a list per call; +64 KiB a call",
        """
        def setup():
            v = tf.Variable(tf.ones([128, 128]))
            return v, []
        """,
        """
        def step(s):
            with tf.GradientTape() as t:
                y = tf.reduce_sum(s[0] * 2.0)
            s[1].append(t.gradient(y, s[0]))
        """,
    ),
    "keras_model_call_training": (
        "no leak",
        "a keras model called with training=True (dropout) per call; +0.0 B a call over 11,600 calls",
        """
        def setup():
            m = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(32), tf.keras.layers.Dropout(0.5), tf.keras.layers.Dense(1)])
            return m, np.random.rand(16, 10).astype("float32")
        """,
        """
        def step(s):
            s[0](s[1], training=True)
        """,
    ),
}

_CHILD = r"""
import json, sys, time, textwrap
import numpy as np
import tensorflow as tf
import leakwidget
ns = {"np": np, "tf": tf}
exec(textwrap.dedent(sys.argv[1]), ns)
exec(textwrap.dedent(sys.argv[2]), ns)
seconds = float(sys.argv[3]) if sys.argv[3] != "none" else None
t = time.perf_counter()
r = leakwidget.watch(ns["step"], setup=ns["setup"], seconds=seconds, widget=False)
wall = time.perf_counter() - t
v = r.verdict
a = getattr(r, "attribution", None)
print(json.dumps({
    "kind": v.kind, "slope": v.slope, "onset": v.onset, "stopped": r.stopped,
    "n": v.iterations, "wall": wall, "attr": getattr(a, "kind", None), "reading": r.reading,
    "summary": v.summary,
}))
"""


def run_case(name: str, seconds: float | None) -> dict:
    _, _, setup, step = CASES[name]
    args = [sys.executable, "-c", _CHILD, setup, step, "none" if seconds is None else str(seconds)]
    t = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed",
                "wall": time.perf_counter() - t}
    return json.loads(out.stdout.strip().splitlines()[-1])


# What the result says, read with its attribution (WatchResult.reading): a leak verdict whose
# growth is garbage or memory the allocator keeps reads "Growing, but not a leak of your code".
NOT_A_LEAK = ("stable", "plateau", "retention")


def _said(d: dict) -> str:
    """The verdict as the result's headline reads it: "retention" or "unsettled" for a leak
    verdict the attribution qualifies, else the verdict's kind."""
    return d.get("reading") or d["kind"]


def _kib(b: float | None) -> str:
    return "-" if b is None else f"{b / 1024:+.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--seconds", type=float, default=None, help="budget (default: the watch's own)")
    ap.add_argument("--summaries", action="store_true", help="print each verdict's sentence")
    args = ap.parse_args()
    names = args.only or list(CASES)
    print(f"{'case':26} {'expected':9} {'verdict':13} {'ok':4} {'KiB/it':>9} {'attr':9} "
          f"{'iters':>6} {'s':>5} stopped")
    rows = []
    for name in names:
        expected = CASES[name][0]
        d = run_case(name, args.seconds)
        rows.append((name, d))
        if "error" in d:
            print(f"{name:26} {expected:9} ERROR {d['error']}")
            continue
        said = _said(d)
        ok = ("yes" if said == expected or (expected == "no leak" and said in NOT_A_LEAK)
              else "open" if said in ("inconclusive", "unsettled") else "NO")
        print(f"{name:26} {expected:9} {said:13} {ok:4} {_kib(d['slope']):>9} "
              f"{str(d['attr']):9} {d['n']:>6} {d['wall']:5.1f} {d['stopped']}", flush=True)
    if args.summaries:
        for name, d in rows:
            print(f"\n{name}: " + textwrap.fill(d.get("summary", d.get("error", "")), 100))


if __name__ == "__main__":
    main()
