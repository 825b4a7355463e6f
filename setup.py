"""hashjax: learning binary hash codes as learning to rank, and searching them fast."""

import pathlib

from setuptools import find_packages, setup

setup(
    name="hashjax",
    version="0.1.0",
    description="Learning to hash as learning to rank, with tie-aware evaluation, in JAX.",
    long_description=pathlib.Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE", "NOTICE"],
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    python_requires=">=3.10",
    packages=find_packages(include=["hashjax", "hashjax.*"]),
    package_data={"hashjax.data": ["mnist_t10k/*.gz", "mnist_t10k/README.md"]},
    install_requires=[
        "jax>=0.4.30",
        "jaxlib>=0.4.30",
        "numpy>=1.24",
        "optax>=0.2",
        "flax>=0.8",
        "orbax-checkpoint>=0.5",
        "absl-py>=1.0",
        "ml_collections>=0.1.1",
        "numba>=0.59",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "threadpoolctl>=3",
    ],
    extras_require={
        # Everything the test suite runs: the notebook (nbclient, or `jupyter nbconvert --execute`), the
        # plots, the tensorflow-datasets loader against tfds' mock data, the faiss interop of hashjax.index, and
        # LambdaMART (lightgbm).
        "test": [
            "pytest>=7",
            "pytest-xdist>=3",
            "nbclient>=0.9",
            "nbformat>=5.9",
            "nbconvert>=7",
            "ipykernel>=6",
            "matplotlib>=3.7",
            "tensorflow-datasets>=4.9",
            "faiss-cpu>=1.7",
            "lightgbm>=4",
        ],
        "plots": ["matplotlib>=3.7"],
        "tfds": ["tensorflow-datasets>=4.9"],
        "bench": ["faiss-cpu>=1.7"],
        # LambdaMART (hashjax.localrank.fit_lambdamart) through LightGBM's lambdarank objective.
        "ltr": ["lightgbm>=4"],
        "notebook": ["matplotlib>=3.7", "jupyter"],
    },
)
