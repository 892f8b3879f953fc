"""The basic GAN's generator behind LitServe (Lightning's model server), for
bench/serve.sh's side-by-side run with `gantry serve`: the weights come from
one gantry checkpoint through Lightning's own load_from_checkpoint (the
tutorial's LightningModule, bench/lightning_gan.py's, as
tests/lightning_checkpoint_test.sh proves it loads them). The API is
LitServe's idiom: POST /predict with JSON {"input": [[100 floats], ...]} of N
rows, the answer {"output": [...]} of N images; its dynamic batching
(max_batch_size requests, batch_timeout seconds) gathers requests of any N.
Run with the Python of scripts/torch2.sh's venv with litserve installed:
   litserve_gan.py CHECKPOINT PORT MAX_BATCH_SIZE [BATCH_TIMEOUT_S=0] [THREADS=1]"""
import os, sys

import litserve as ls
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class GanAPI(ls.LitAPI):
    def setup(self, device):
        torch.set_num_threads(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
        from lightning_gan import GAN
        from torch.jit._pickle import restore_type_tag  # gantry's checkpoints: LibTorch's pickler tags typed dicts
        torch.serialization.add_safe_globals([restore_type_tag])
        self.model = GAN.load_from_checkpoint(sys.argv[1], map_location="cpu").eval()

    def decode_request(self, request):
        return torch.tensor(request["input"], dtype=torch.float32)

    def batch(self, inputs):  # requests of N rows each: one forward of their rows, split back after
        return torch.cat(inputs), [len(x) for x in inputs]

    def predict(self, x):
        if isinstance(x, tuple):
            rows, sizes = x
            with torch.inference_mode():
                return list(torch.split(self.model(rows), sizes))
        with torch.inference_mode():
            return self.model(x)

    def unbatch(self, output):
        return output

    def encode_response(self, output):
        return {"output": output.tolist()}


if __name__ == "__main__":
    max_batch = int(sys.argv[3])
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    api = GanAPI(max_batch_size=max_batch, batch_timeout=timeout)
    ls.LitServer(api, accelerator="cpu", workers_per_device=1).run(
        port=int(sys.argv[2]), generate_client_file=False, log_level="warning")
