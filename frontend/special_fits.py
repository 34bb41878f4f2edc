"""Coefficients of the Chebyshev expansions behind frontend/special_decomp.py, fitted here (not
copied from a library): `numpy.polynomial.chebyshev.chebinterpolate` of torch's own float64
functions, terms below 2e-10 of the first dropped (float32-accurate; float64 inputs keep
eager's kernel). Regenerate with `python -m ember.frontend.special_fits` (prints this table).

Variables (s in [-1, 1] in every case):
* I0E_LOW, I1E_LOW: i0e(x), i1e(x) / x on x in [0, 8]; s = x / 4 - 1.
* I0E_HIGH, I1E_HIGH: i0e(x) sqrt(x), i1e(x) sqrt(x) on x in [8, inf); s = 16 / x - 1.
* ERFC_T: log(erfc(z) / t) + z^2 on z in [1/2, inf), t = 2 / (2 + z); s = 2.5 t - 1.
* ERFINV_CENTRAL: erfinv(y) / y on |y| <= 0.7; s = y^2 / 0.245 - 1.
* ERFINV_TAIL: erfinv(y) on y in (0.7, 1), z = sqrt(-log((1 - y) / 2)) in [ERFINV_Z_LOW,
  ERFINV_Z_HIGH]; s = 2 (z - low) / (high - low) - 1.
"""
ERFINV_Z_LOW = 1.3773597877409813   # sqrt(-log(0.15))
ERFINV_Z_HIGH = 6.2                 # beyond any y < 1 in float64

I0E_LOW = (  # 21 terms, max relative error of the fit 2.2e-14
    0.33839763720473803, -0.3046826723431984, 0.17162090152220877,
    -0.09490109704804763, 0.04930528423967064, -0.02373741480589941,
    0.010546460394594887, -0.004324309995050473, 0.0016394756169412006,
    -0.0005763755745384304, 0.00018850288509558323, -5.7541950100519327e-05,
    1.6448448070226805e-05, -4.41673835803787e-06, 1.117387538411482e-06,
    -2.6707938483811625e-07, 6.046994942463722e-08, -1.3000249372421443e-08,
    2.6598225684043815e-09, -5.189786064855436e-10, 9.675665271537207e-11,
)
I1E_LOW = (  # 20 terms, max relative error of the fit 3.4e-14
    0.12629359322181682, -0.17641651835783406, 0.10264365868984711,
    -0.052945981208094975, 0.02472644903062649, -0.01056408489462617,
    0.004156422944312852, -0.0015135724506312137, 0.0005122859561685298,
    -0.00016176081582582012, 4.781565107539929e-05, -1.3273163655893041e-05,
    3.4702513079309e-06, -8.568720262406265e-07, 2.0032947506777174e-07,
    -4.445059099107462e-08, 9.381537013984283e-09, -1.8872493282625557e-09,
    3.6255850917369673e-10, -6.663435707689574e-11,
)
I0E_HIGH = (  # 8 terms, max relative error of the fit 4.5e-15
    0.40224520550705445, 0.0033691164782557056, 6.889758346918505e-05,
    2.891370520830445e-06, 2.0489185896368452e-07, 2.266668989649282e-08,
    3.396232076856945e-09, 4.940602294146926e-10,
)
I1E_HIGH = (  # 8 terms, max relative error of the fit 4.3e-15
    0.38928811750914005, -0.009761097491361472, -0.00011058893876260455,
    -3.882564808876442e-06, -2.512236237717535e-07, -2.631468845928914e-08,
    -3.835380351799557e-09, -5.589743424381378e-10,
)
ERFC_T = (  # 14 terms, max relative error of the fit 9.7e-15
    -0.78318707272406, 0.5058947933173407, 0.020165332295700375,
    -0.004150784270483689, -0.0006929393033131572, 8.061304448090772e-05,
    2.585099951070334e-05, -2.4532413619993164e-06, -1.0665628949726386e-06,
    1.095613621739431e-07, 4.6182836906887675e-08, -6.305089145331547e-09,
    -1.9633310441036246e-09, 3.9793741692368594e-10,
)
ERFINV_CENTRAL = (  # 11 terms, max relative error of the fit 3.8e-15
    0.9593416315998746, 0.0795504841715543, 0.007148315229841786,
    0.0008005324737218025, 9.957702365311884e-05, 1.3170910813679189e-05,
    1.8136869912471812e-06, 2.569516405817122e-07, 3.718019771249282e-08,
    5.468300729495396e-09, 8.147468261277324e-10,
)
ERFINV_TAIL = (  # 18 terms, max relative error of the fit 5.4e-11
    3.3928535622575673, 2.592674283604788, -0.04811098044513802,
    0.013550643629471953, -0.003950045074138607, 0.0011789315068663475,
    -0.0003583291601167525, 0.00011057733699401004, -3.457757457266841e-05,
    1.094051984983635e-05, -3.498368189978583e-06, 1.1292628624498032e-06,
    -3.6760174536497185e-07, 1.2055819916176195e-07, -3.9799081684750124e-08,
    1.3214983648912536e-08, -4.4103570713097e-09, 1.478368428488498e-09,
)

def _fit():     # pragma: no cover - run by hand to regenerate the table above
    import numpy as np
    from numpy.polynomial import chebyshev as cheb

    import torch
    sp = torch.special

    def t(a):
        return torch.from_numpy(np.asarray(a, dtype=np.float64))

    def high(fn):
        def g(s):
            x = 16 / np.maximum(s + 1, 1e-300)
            return np.where(s + 1 < 1e-12, 1 / np.sqrt(2 * np.pi), fn(t(x)).numpy() * np.sqrt(x))
        return g

    def erfc_g(s):
        tt = (s + 1) / 2.5
        z = np.where(tt > 0, 2 / np.maximum(tt, 1e-300) - 2, np.inf)
        with np.errstate(divide="ignore"):
            v = np.log(sp.erfcx(t(z)).numpy() / np.maximum(tt, 1e-300))
        return np.where(tt < 1e-12, np.log(1 / (2 * np.sqrt(np.pi))), v)

    def erfinv_c(s):
        y = np.sqrt((s + 1) * 0.245)
        return np.where(y == 0, np.sqrt(np.pi) / 2,
                        torch.erfinv(t(y)).numpy() / np.where(y == 0, 1, y))

    def erfinv_t(s):
        z = ERFINV_Z_LOW + (s + 1) / 2 * (ERFINV_Z_HIGH - ERFINV_Z_LOW)
        return -sp.ndtri(t(np.exp(-z * z))).numpy() / np.sqrt(2)   # erfcinv(2 e^-z^2)

    def i1e_low(s):
        x = (s + 1) * 4
        return np.where(x == 0, 0.5, sp.i1e(t(x)).numpy() / np.where(x == 0, 1, x))

    fits = {"I0E_LOW": (lambda s: sp.i0e(t((s + 1) * 4)).numpy(), 28),
            "I1E_LOW": (i1e_low, 28), "I0E_HIGH": (high(sp.i0e), 24),
            "I1E_HIGH": (high(sp.i1e), 24), "ERFC_T": (erfc_g, 24),
            "ERFINV_CENTRAL": (erfinv_c, 20), "ERFINV_TAIL": (erfinv_t, 20)}
    for name, (fn, deg) in fits.items():
        c = cheb.chebinterpolate(fn, deg)
        s = np.cos(np.linspace(0, np.pi, 20001))
        err = np.max(np.abs(cheb.chebval(s, c) - fn(s)) / np.maximum(np.abs(fn(s)), 1e-300))
        n = len(c)
        while n > 1 and abs(c[n - 1]) < 2e-10 * abs(c[0]):
            n -= 1
        print(f"{name} = (  # {n} terms, max relative error of the fit {err:.1e}")
        for i in range(0, n, 3):
            print("    " + " ".join(f"{float(v)!r}," for v in c[i:min(i + 3, n)]))
        print(")")


if __name__ == "__main__":
    _fit()
