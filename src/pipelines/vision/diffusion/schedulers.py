"""diffusers' schedulers in NumPy: Euler, Euler ancestral, DDIM and LCM, as diffusers 0.42 writes
them (scheduling_euler_discrete.py, scheduling_euler_ancestral_discrete.py, scheduling_ddim.py,
scheduling_lcm.py), for a repo's ``scheduler/scheduler_config.json``.

    scheduler = scheduler_for(config)          # the class its "_class_name" names
    scheduler.set_timesteps(4)                 # .timesteps, .init_noise_sigma
    for i, t in enumerate(scheduler.timesteps):
        x_in = scheduler.scale_model_input(x, i)
        x = scheduler.step(unet(x_in, t), i, x, noise)    # noise: scheduler.noise_at(i) or None

diffusers keeps a step counter and finds it from the timestep; here a step is named by its index
``i`` (the same index when the loop starts at the first timestep, as text-to-image does). The math
runs in float32 as diffusers' torch tensors do: schedule constants are float32 scalars, so NumPy's
products keep float32 as torch's do, and ``x ** 0.5`` is ``np.sqrt`` (torch computes a 0.5 power
with sqrt; NumPy's float32 power can differ from it in the last bit). A step that adds noise
takes it from the caller (drawn from the pipeline's RandomState, where diffusers draws from a
torch generator).
"""

import math

import numpy as np

from ....errors import PipelineError

F32 = np.float32


class Scheduler:
    """What the four share: betas and alphas_cumprod from the config, and its checks."""

    defaults = {"num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02,
                "beta_schedule": "linear", "trained_betas": None, "prediction_type": "epsilon",
                "timestep_spacing": "linspace", "steps_offset": 0}
    # options diffusers reads that change nothing at their default values here, and are refused
    # at others (where this port has not written diffusers' branch)
    unsupported = {"rescale_betas_zero_snr": False, "thresholding": False}
    predictions = ("epsilon", "v_prediction", "sample")
    init_noise_sigma = F32(1.0)

    def __init__(self, config=None):
        config = {k: v for k, v in dict(config or {}).items() if not k.startswith("_")}
        self.config = {**self.defaults, **{k: config[k] for k in config if k in self.defaults}}
        for name, default in self.unsupported.items():
            if config.get(name, default) != default:
                raise PipelineError(f"{type(self).__name__}: scheduler_config.json's {name}="
                                    f"{config[name]!r} is not supported here (only {default!r})")
        if self.config["prediction_type"] not in self.predictions:
            raise PipelineError(f"{type(self).__name__}: prediction_type "
                                f"{self.config['prediction_type']!r} is not one of "
                                f"{list(self.predictions)}")
        # torch's CPU cumprod accumulates float32 in float64 (its acc_type); a float32 running
        # product differs in 944 of 1000 entries by up to 3e-7
        alphas = F32(1.0) - _betas(self.config)
        self.alphas_cumprod = np.cumprod(alphas.astype(np.float64)).astype(np.float32)
        self.timesteps = None

    def set_timesteps(self, num_inference_steps):
        raise NotImplementedError

    def scale_model_input(self, sample, i):
        return sample

    def noise_at(self, i):
        """Whether step ``i`` adds noise (then ``step`` needs it)."""
        return False

    def step(self, model_output, i, sample, noise=None):
        raise NotImplementedError

    def _check_steps(self, n):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise PipelineError(f"num_inference_steps must be a positive int, got {n!r}")
        if n > self.config["num_train_timesteps"]:
            raise PipelineError(f"num_inference_steps ({n}) cannot exceed the scheduler's "
                                f"num_train_timesteps ({self.config['num_train_timesteps']})")
        self.num_inference_steps = int(n)

    def _spaced(self, n, dtype):
        """diffusers' timestep_spacing: "linspace", "leading" (+ steps_offset), "trailing"."""
        train, spacing = self.config["num_train_timesteps"], self.config["timestep_spacing"]
        if spacing == "linspace":
            if dtype == np.int64:  # DDIM rounds its linspace; the sigma schedulers keep floats
                return np.linspace(0, train - 1, n).round()[::-1].astype(np.int64)
            return np.linspace(0, train - 1, n, dtype=np.float32)[::-1].copy()
        if spacing == "leading":
            ratio = train // n
            return (np.arange(0, n) * ratio).round()[::-1].astype(dtype) + self.config[
                "steps_offset"]
        if spacing == "trailing":
            return np.arange(train, 0, -train / n).round().astype(dtype) - 1
        raise PipelineError(f"timestep_spacing {spacing!r} is not one of 'linspace', 'leading', "
                            "'trailing'")


def _betas(config):
    """diffusers' betas in float32: linear, scaled_linear, squaredcos_cap_v2, or trained."""
    n, kind = config["num_train_timesteps"], config["beta_schedule"]
    if config.get("trained_betas") is not None:
        return np.asarray(config["trained_betas"], np.float32)
    if kind == "linear":
        return _linspace(config["beta_start"], config["beta_end"], n)
    if kind == "scaled_linear":
        return _linspace(config["beta_start"] ** 0.5, config["beta_end"] ** 0.5, n) ** 2
    if kind == "squaredcos_cap_v2":  # betas_for_alpha_bar, cosine
        def bar(t):
            return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
        return np.array([min(1 - bar((i + 1) / n) / bar(i / n), 0.999) for i in range(n)],
                        np.float32)
    raise PipelineError(f"beta_schedule {kind!r} is not one of 'linear', 'scaled_linear', "
                        "'squaredcos_cap_v2'")


def _linspace(start, end, n):
    """torch.linspace(start, end, n, dtype=float32) bit for bit, as its CPU kernel computes it: a
    float32 step, then start + step * i (fused, one rounding) for the first half and
    end - step * (n - 1 - i) for the rest. NumPy's float64 linspace rounded to float32 differs
    in 307 of SD's 1000 betas by an ulp, which moved the top sigma by 9e-6."""
    start, end = np.float32(start), np.float32(end)
    step = (end - start) / np.float32(n - 1)
    i = np.arange(n, dtype=np.float64)
    exact = np.where(i < n // 2, np.float64(start) + np.float64(step) * i,
                     np.float64(end) - np.float64(step) * (n - 1 - i))
    return exact.astype(np.float32)


def _original(prediction, model_output, sample, alpha_prod, beta_prod):
    """The predicted clean sample x0 of DDIM / LCM's parametrization."""
    if prediction == "epsilon":
        return (sample - np.sqrt(beta_prod) * model_output) / np.sqrt(alpha_prod)
    if prediction == "sample":
        return model_output
    return np.sqrt(alpha_prod) * sample - np.sqrt(beta_prod) * model_output


class EulerDiscreteScheduler(Scheduler):
    """Karras et al.'s Euler sampler over sigmas (diffusers' EulerDiscreteScheduler, s_churn 0,
    as the pipelines call it)."""

    defaults = {**Scheduler.defaults, "final_sigmas_type": "zero"}
    unsupported = {**Scheduler.unsupported, "use_karras_sigmas": False,
                   "use_exponential_sigmas": False, "use_beta_sigmas": False,
                   "timestep_type": "discrete", "interpolation_type": "linear"}

    def set_timesteps(self, num_inference_steps):
        self._check_steps(num_inference_steps)
        self.timesteps = self._spaced(self.num_inference_steps, np.float32)
        ac = self.alphas_cumprod
        sigmas = np.sqrt((1 - ac) / ac)
        sigmas = np.interp(self.timesteps, np.arange(len(sigmas)), sigmas)
        final = self.config.get("final_sigmas_type", "zero")  # Euler ancestral: always zero
        last = {"zero": 0.0, "sigma_min": float(np.sqrt((1 - ac[0]) / ac[0]))}.get(final)
        if last is None:
            raise PipelineError(f"final_sigmas_type {final!r} is not 'zero' or 'sigma_min'")
        self.sigmas = np.concatenate([sigmas, [last]]).astype(np.float32)
        top = self.sigmas.max()
        self.init_noise_sigma = (top if self.config["timestep_spacing"] in ("linspace", "trailing")
                                 else np.sqrt(top ** 2 + F32(1)))

    def scale_model_input(self, sample, i):
        return sample / np.sqrt(self.sigmas[i] ** 2 + F32(1))

    def _original(self, model_output, sample, sigma):
        prediction = self.config["prediction_type"]
        if prediction == "epsilon":
            return sample - sigma * model_output
        if prediction == "v_prediction":
            return (model_output * (-sigma / np.sqrt(sigma ** 2 + F32(1)))
                    + sample / (sigma ** 2 + F32(1)))
        return model_output

    def step(self, model_output, i, sample, noise=None):
        sigma = self.sigmas[i]
        derivative = (sample - self._original(model_output, sample, sigma)) / sigma
        return sample + derivative * (self.sigmas[i + 1] - sigma)


class EulerAncestralDiscreteScheduler(EulerDiscreteScheduler):
    """Euler with fresh noise at every step (diffusers' EulerAncestralDiscreteScheduler)."""

    defaults = Scheduler.defaults
    unsupported = Scheduler.unsupported

    def noise_at(self, i):
        return True

    def step(self, model_output, i, sample, noise=None):
        sigma, sigma_to = self.sigmas[i], self.sigmas[i + 1]
        up = np.sqrt(sigma_to ** 2 * (sigma ** 2 - sigma_to ** 2) / sigma ** 2)
        down = np.sqrt(sigma_to ** 2 - up ** 2)
        derivative = (sample - self._original(model_output, sample, sigma)) / sigma
        return sample + derivative * (down - sigma) + noise * up


class DDIMScheduler(Scheduler):
    """DDIM (diffusers' DDIMScheduler); ``eta`` > 0 adds noise at each step."""

    defaults = {**Scheduler.defaults, "clip_sample": True, "clip_sample_range": 1.0,
                "set_alpha_to_one": True, "timestep_spacing": "leading"}

    def __init__(self, config=None, eta=0.0):
        super().__init__(config)
        self.final_alpha_cumprod = (F32(1.0) if self.config["set_alpha_to_one"]
                                    else self.alphas_cumprod[0])
        self.eta = float(eta)

    def set_timesteps(self, num_inference_steps):
        self._check_steps(num_inference_steps)
        self.timesteps = self._spaced(self.num_inference_steps, np.int64)

    def noise_at(self, i):
        return self.eta > 0

    def _alpha(self, t):
        return self.alphas_cumprod[t] if t >= 0 else self.final_alpha_cumprod

    def step(self, model_output, i, sample, noise=None):
        t = int(self.timesteps[i])
        prev = t - self.config["num_train_timesteps"] // self.num_inference_steps
        alpha, alpha_prev = self._alpha(t), self._alpha(prev)
        beta = 1 - alpha
        prediction = self.config["prediction_type"]
        x0 = _original(prediction, model_output, sample, alpha, beta)
        if prediction == "epsilon":
            eps = model_output
        elif prediction == "sample":
            eps = (sample - np.sqrt(alpha) * x0) / np.sqrt(beta)
        else:
            eps = np.sqrt(alpha) * model_output + np.sqrt(beta) * sample
        if self.config["clip_sample"]:
            bound = self.config["clip_sample_range"]
            x0 = np.clip(x0, -bound, bound)
        variance = ((1 - alpha_prev) / beta) * (1 - alpha / alpha_prev)
        std = F32(self.eta) * np.sqrt(variance)
        out = np.sqrt(alpha_prev) * x0 + np.sqrt(1 - alpha_prev - std ** 2) * eps
        return out + std * noise if self.eta > 0 else out


class LCMScheduler(Scheduler):
    """Latent consistency models' multistep sampler (diffusers' LCMScheduler)."""

    defaults = {**Scheduler.defaults, "beta_start": 0.00085, "beta_end": 0.012,
                "beta_schedule": "scaled_linear", "original_inference_steps": 50,
                "clip_sample": False, "clip_sample_range": 1.0, "set_alpha_to_one": True,
                "timestep_scaling": 10.0, "timestep_spacing": "leading"}

    def __init__(self, config=None):
        super().__init__(config)
        self.final_alpha_cumprod = (F32(1.0) if self.config["set_alpha_to_one"]
                                    else self.alphas_cumprod[0])

    def set_timesteps(self, num_inference_steps):
        self._check_steps(num_inference_steps)
        n, original = self.num_inference_steps, self.config["original_inference_steps"]
        k = self.config["num_train_timesteps"] // original
        origin = (np.arange(1, original + 1) * k - 1)[::-1]
        if len(origin) // n < 1:
            raise PipelineError(f"num_inference_steps ({n}) cannot exceed the LCM scheduler's "
                                f"original_inference_steps ({original})")
        picks = np.floor(np.linspace(0, len(origin), num=n, endpoint=False)).astype(np.int64)
        self.timesteps = origin[picks].astype(np.int64)

    def noise_at(self, i):
        return i != self.num_inference_steps - 1

    def step(self, model_output, i, sample, noise=None):
        t = int(self.timesteps[i])
        prev = int(self.timesteps[i + 1]) if i + 1 < len(self.timesteps) else t
        alpha = self.alphas_cumprod[t]
        alpha_prev = self.alphas_cumprod[prev] if prev >= 0 else self.final_alpha_cumprod
        scaled = F32(t * self.config["timestep_scaling"])
        c_skip = F32(0.25) / (scaled ** 2 + F32(0.25))  # sigma_data 0.5, squared
        c_out = scaled / np.sqrt(scaled ** 2 + F32(0.25))
        x0 = _original(self.config["prediction_type"], model_output, sample, alpha, 1 - alpha)
        if self.config["clip_sample"]:
            bound = self.config["clip_sample_range"]
            x0 = np.clip(x0, -bound, bound)
        denoised = c_out * x0 + c_skip * sample
        if not self.noise_at(i):
            return denoised
        return np.sqrt(alpha_prev) * denoised + np.sqrt(1 - alpha_prev) * noise


SCHEDULERS = {cls.__name__: cls for cls in (EulerDiscreteScheduler,
                                            EulerAncestralDiscreteScheduler, DDIMScheduler,
                                            LCMScheduler)}


def scheduler_for(config, eta=0.0):
    """The scheduler scheduler_config.json's ``_class_name`` names, with its settings."""
    name = dict(config or {}).get("_class_name")
    if name not in SCHEDULERS:
        raise PipelineError(f"scheduler_config.json names the scheduler {name!r}; text-to-image "
                            f"runs {sorted(SCHEDULERS)}: give scheduler= one of them")
    cls = SCHEDULERS[name]
    return cls(config, eta=eta) if cls is DDIMScheduler else cls(config)
