"""ds.estimate against ds-opt --plan=auto on the same export: the same
chosen layout and predicted step (to 1e-9 s), every ranked candidate
within the device memory and sorted by predicted step; bad arguments
raise with a message (test/Python/estimate.test)."""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "examples", "gpt"))
import export_gpt  # noqa: E402
import torch  # noqa: E402

import ds  # noqa: E402


class Loss(torch.nn.Module):
    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx, targets):
        return self.gpt(idx, targets)[1]


def main():
    ds_opt, cluster = sys.argv[1], sys.argv[2]
    model, idx, targets = export_gpt.build("tiny", seed=0)
    wrapped = Loss(model)
    inputs = {"idx": idx, "targets": targets}
    opt = torch.optim.Adam(wrapped.parameters(), lr=1e-3)
    est = ds.estimate(wrapped, inputs, cluster=cluster, global_batch=8,
                      optimizer=opt)
    memory = json.load(open(cluster))["device"]["memory"]
    steps = [c.step_time_s for c in est.ranked]
    print("chosen", est.chosen.layout, "ranked", len(est.ranked))
    print("ranked fit", all(0 < c.peak <= memory for c in est.ranked))
    print("sorted", steps == sorted(steps), "first is chosen",
          est.ranked[0] == est.chosen)
    # The same search through the tool on the same export.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        ds.export(wrapped, inputs, path)
        out = subprocess.run(
            [ds_opt, path, "--plan=auto", "--cluster=" + cluster,
             "--global-batch=8", "--optimizer=adam", "--lr=0.001",
             "--report=json", "-o", os.path.join(d, "p.plan")],
            check=True, capture_output=True, text=True).stdout
    tool = json.loads(out)
    print("same as ds-opt", tool["plan"]["chosen"] == est.chosen.layout,
          abs(tool["predicted"]["step_time_s"] -
              est.predicted["step_time_s"]) <= 1e-9)
    for bad in ({"cluster": None}, {"global_batch": 0},
                {"cluster": cluster + ".missing"}):
        args = dict(cluster=cluster, global_batch=8, optimizer=opt)
        args.update(bad)
        try:
            ds.estimate(wrapped, inputs, **args)
            print("no error for", bad)
        except (ValueError, RuntimeError) as e:
            print("refused:", str(e).splitlines()[0][:90])
    # Nothing fits a 64 KiB device: the planner's one-line error.
    tiny = cluster + ".tiny.json"
    spec = json.load(open(cluster))
    spec["device"]["memory"] = 65536
    json.dump(spec, open(tiny, "w"))
    try:
        ds.estimate(wrapped, inputs, cluster=tiny, global_batch=8,
                    optimizer=opt)
        print("no error for a 64 KiB device")
    except RuntimeError as e:
        print("refused:", str(e).splitlines()[0][:60])
    print("PASS")


if __name__ == "__main__":
    main()
