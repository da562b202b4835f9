"""The reference server is written in Rust, and clients see the error texts of its
crates: serde/serde_json (params decoding), base64, uuid, url and ``std::io::Error``.
Each crate's wording is reproduced once, in the module named after it; the rest of
the code imports the texts from here instead of spelling them."""

__all__: list[str] = []
