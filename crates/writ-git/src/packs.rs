//! How a commit's new objects reach the disk: built in memory, then written as one pack.
//!
//! A five-file commit makes about a dozen objects (five blobs, the trees along the paths, the
//! commit). Loose, each is a file of its own (a temp file, linked into a fan-out folder that may
//! be new), and creating a file is what costs most on a disk writ has just synced to: on this
//! project's ext4 machine each new inode first scans past the recently deleted ones of its group.
//! As one pack they are two files, the pack and its index, whatever their number.
//!
//! The pack and its index are written here rather than by libgit2's pack builder, which searches
//! for deltas among the objects (a millisecond for a commit's dozen, a quarter of a second when
//! merging packs) and then indexes what it wrote a second time. A commit's objects are small and
//! unlike each other, and merging packs only needs their bytes one after the other: an entry's
//! checksum and its delta bases' relative offsets stay as they were.
//!
//! Packs pile up, one per commit. A user's git runs `gc --auto`, which repacks past 50 packs, but
//! in a repository only writ commits into nothing ever would, and a lookup of an object tries
//! each pack until one holds it. So once more than [`MERGE_AT`] small packs are there, they are
//! merged into one and removed, as `git repack` does — only packs writ wrote itself, which it
//! names in a ledger beside git's files ([`LEDGER`]); a user's own small packs (a `git fetch`
//! makes them) are git's to repack.
//!
//! Durability: a pack and its index are synced before they are renamed into place, and the
//! folder after; a merge removes the packs it merged only once the merged pack and the ledger
//! that names it are on disk. A crash at any step leaves every object in some pack (at worst
//! twice, which git allows and its next `gc` tidies).

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use git2::{ObjectType, Odb, OdbLookupFlags, Oid, Repository};
use sha1::{Digest, Sha1};

/// Where the objects that a [`Staged`] repository writes are kept until they are packed: above
/// the disk's own backends, so they are read back from memory.
const IN_MEMORY_PRIORITY: i32 = 1000;

/// The ledger of the packs writ wrote, one name (`pack-<sha1>`) a line, in the repository's
/// common git directory. A line torn by a crash names no pack and is ignored.
const LEDGER: &str = "writ-packs";

/// How many small packs are left as they are; one more, and they are merged.
const MERGE_AT: usize = 32;

/// A pack this small is one writ may merge: a commit's is a few kilobytes, and one merged from
/// [`MERGE_AT`] of them stays below this size for a few hundred commits, so merged packs are
/// merged again until they are large, and a user's large packs are left alone.
const SMALL_PACK_BYTES: u64 = 1 << 20;

/// A repository whose object writes go to memory (with the disk's objects still readable) until
/// [`Staged::write`] writes the ones named as one pack. Dropped without writing, the objects are
/// gone and the repository writes to disk again.
pub(crate) struct Staged<'r> {
    repo: &'r Repository,
    /// The repository's own object database, given back when done.
    disk: Odb<'r>,
}

impl<'r> Staged<'r> {
    pub(crate) fn begin(repo: &'r Repository) -> Result<Self, git2::Error> {
        let disk = repo.odb()?;
        let objects = objects_dir(repo);
        let objects = objects
            .to_str()
            .ok_or_else(|| git2::Error::from_str("the objects folder's path is not UTF-8"))?;
        let staging = Odb::new()?;
        // libgit2 writes an object to the first backend that takes writes; an alternate takes
        // none, so every new object lands in memory, and the disk's objects are read as before.
        staging.add_new_mempack_backend(IN_MEMORY_PRIORITY)?;
        staging.add_disk_alternate(objects)?;
        repo.set_odb(&staging)?;
        Ok(Staged { repo, disk })
    }

    /// Writes those of `new` not already on disk as one pack (with its index) into the
    /// repository's pack folder. Everything the repository wrote since [`Staged::begin`] must be
    /// among them, or it is lost.
    pub(crate) fn write(self, new: &[Oid]) -> io::Result<()> {
        let staging = self.repo.odb().map_err(io::Error::other)?;
        let mut seen = HashSet::new();
        let mut pack = PackWriter::new();
        for &id in new {
            // Not refreshed: a pack another process has just written is not worth a read of the
            // folder, and holding an object twice is allowed across packs.
            if !seen.insert(id) || self.disk.exists_ext(id, OdbLookupFlags::NO_REFRESH) {
                continue;
            }
            let object = staging.read(id).map_err(io::Error::other)?;
            pack.add(id, object.kind(), object.data())?;
        }
        if pack.entries.is_empty() {
            return Ok(());
        }
        let name = pack.finish(&objects_dir(self.repo).join("pack"))?;
        // The commit stands without it: an unlisted pack is only never merged.
        let _ = note_pack(self.repo, &name);
        Ok(())
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        // Setting an object database only swaps a pointer.
        let _ = self.repo.set_odb(&self.disk);
    }
}

/// The repository's objects folder (a worktree's are its main repository's).
fn objects_dir(repo: &Repository) -> PathBuf {
    repo.commondir().join("objects")
}

/// One object of a pack, as its index lists it.
struct Entry {
    id: Oid,
    /// Of the entry's bytes in the pack (its header and compressed data).
    crc: u32,
    offset: u64,
}

/// A pack being written: its bytes after the header, and its entries.
struct PackWriter {
    body: Vec<u8>,
    entries: Vec<Entry>,
}

/// A pack's header: `PACK`, version 2, then the object count.
const PACK_HEADER: usize = 12;

impl PackWriter {
    fn new() -> Self {
        PackWriter {
            body: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// Appends a whole object, compressed.
    fn add(&mut self, id: Oid, kind: ObjectType, data: &[u8]) -> io::Result<()> {
        let code: u8 = match kind {
            ObjectType::Commit => 1,
            ObjectType::Tree => 2,
            ObjectType::Blob => 3,
            ObjectType::Tag => 4,
            _ => return Err(io::Error::other(format!("{id} cannot be packed"))),
        };
        let start = self.body.len();
        // The type and the size, seven bits a byte after the first four, low bits first.
        let mut size = data.len();
        let mut byte = (code << 4) | (size & 0x0f) as u8;
        size >>= 4;
        while size != 0 {
            self.body.push(byte | 0x80);
            byte = (size & 0x7f) as u8;
            size >>= 7;
        }
        self.body.push(byte);
        let mut zlib = flate2::write::ZlibEncoder::new(
            std::mem::take(&mut self.body),
            // A commit's objects are small: the fastest level costs little in size.
            flate2::Compression::fast(),
        );
        zlib.write_all(data)?;
        self.body = zlib.finish()?;
        self.entries.push(Entry {
            id,
            crc: crc32fast::hash(&self.body[start..]),
            offset: (PACK_HEADER + start) as u64,
        });
        Ok(())
    }

    /// Writes the pack and then its index into `folder`, each under a temp name renamed into
    /// place, as git does: a reader finds packs by their index, and never sees half of one.
    /// The pack's name.
    fn finish(self, folder: &Path) -> io::Result<String> {
        let count = u32::try_from(self.entries.len())
            .map_err(|_| io::Error::other("too many objects for one pack"))?;
        let mut pack = Vec::with_capacity(PACK_HEADER + self.body.len() + 20);
        pack.extend_from_slice(b"PACK");
        pack.extend_from_slice(&2u32.to_be_bytes());
        pack.extend_from_slice(&count.to_be_bytes());
        pack.extend_from_slice(&self.body);
        let checksum = Sha1::digest(&pack);
        pack.extend_from_slice(&checksum);
        let index = index_of(self.entries, &checksum)?;
        let name: String = checksum.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("pack-{name}");
        put(folder, &format!("{name}.pack"), &pack)?;
        put(folder, &format!("{name}.idx"), &index)?;
        sync_dir(folder)?;
        Ok(name)
    }
}

/// A version 2 pack index of `entries`.
fn index_of(mut entries: Vec<Entry>, pack_checksum: &[u8]) -> io::Result<Vec<u8>> {
    entries.sort_by_key(|e| e.id);
    let mut index = Vec::with_capacity(8 + 1024 + entries.len() * 28 + 40);
    index.extend_from_slice(&[0xff, b't', b'O', b'c', 0, 0, 0, 2]);
    let mut fanout = [0u32; 256];
    for entry in &entries {
        fanout[usize::from(entry.id.as_bytes()[0])] += 1;
    }
    let mut running = 0u32;
    for n in fanout {
        running += n;
        index.extend_from_slice(&running.to_be_bytes());
    }
    for entry in &entries {
        index.extend_from_slice(entry.id.as_bytes());
    }
    for entry in &entries {
        index.extend_from_slice(&entry.crc.to_be_bytes());
    }
    for entry in &entries {
        // Offsets past 2 GiB need the index's second table; writ's packs never get there.
        let offset = u32::try_from(entry.offset)
            .ok()
            .filter(|o| o & 0x8000_0000 == 0)
            .ok_or_else(|| io::Error::other("a pack too large for writ to index"))?;
        index.extend_from_slice(&offset.to_be_bytes());
    }
    index.extend_from_slice(pack_checksum);
    let checksum = Sha1::digest(&index);
    index.extend_from_slice(&checksum);
    Ok(index)
}

/// Writes `bytes` as `folder/name`, read-only as git's packs are, through a temp file.
fn put(folder: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    // The process id alone repeats: in a container writ is often pid 1 after every restart, and
    // a temp file a crash left behind under the same pack's name would refuse every later try.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let temp = folder.join(format!("tmp_{name}_{}_{nanos}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o444);
    }
    let written = options
        .open(&temp)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| std::fs::rename(&temp, folder.join(name)));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Makes a rename or a removal in `folder` durable.
fn sync_dir(folder: &Path) -> io::Result<()> {
    std::fs::File::open(folder)?.sync_all()
}

/// The packs the ledger names.
fn ledger(repo: &Repository) -> HashSet<String> {
    std::fs::read_to_string(repo.commondir().join(LEDGER))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("pack-"))
        .map(str::to_owned)
        .collect()
}

/// Adds `name` to the ledger: one appended line, synced.
fn note_pack(repo: &Repository, name: &str) -> io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(repo.commondir().join(LEDGER))?;
    file.write_all(format!("{name}\n").as_bytes())?;
    file.sync_data()
}

/// Replaces the ledger with `names`, through a synced temp file renamed into place.
fn rewrite_ledger(repo: &Repository, names: &[String]) -> io::Result<()> {
    let dir = repo.commondir();
    let temp = dir.join(format!("{LEDGER}.tmp{}", std::process::id()));
    let mut text = String::new();
    for name in names {
        text.push_str(name);
        text.push('\n');
    }
    let written = std::fs::File::create(&temp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&temp, dir.join(LEDGER)))
        .and_then(|()| sync_dir(dir));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Where a test kills the process mid-merge, as a power cut or a `kill -9` would; nothing
/// outside tests.
fn fault_point(_step: &str) {
    #[cfg(test)]
    tests::abort_if_asked(_step);
}

/// Merges the repository's small packs that writ wrote (the ledger names them) into one once
/// there are more than [`MERGE_AT`]; whether it did. A pack with a `.keep`, `.promisor`,
/// `.mtimes` or `.bitmap` file beside it is git's to manage, and a repository with a multi-pack
/// index is left to git entirely (the index names its packs).
///
/// In order: the merged pack and its index written and synced; the ledger rewritten to name it
/// instead of the packs it holds, synced; only then those packs removed.
/// The repository's object database still lists the removed packs (it skips them, since they are
/// gone, but keeps them open): it should be opened again.
pub(crate) fn merge_small_packs(repo: &Repository) -> io::Result<bool> {
    let folder = objects_dir(repo).join("pack");
    let ours = ledger(repo);
    let small: Vec<PathBuf> = small_packs(&folder)?
        .into_iter()
        .filter(|p| {
            p.file_stem()
                .and_then(|n| n.to_str())
                .is_some_and(|n| ours.contains(n))
        })
        .collect();
    if small.len() <= MERGE_AT {
        return Ok(false);
    }
    let mut merged = PackWriter::new();
    let mut taken = Vec::new();
    let mut ids = HashSet::new();
    for pack in small {
        // A pack that cannot be read, or that holds an object already taken (one pack may not
        // hold an object twice), is left where it is.
        let Ok((entries, bytes)) = read_pack(&pack) else {
            continue;
        };
        if entries.iter().any(|e| ids.contains(&e.id)) {
            continue;
        }
        let base = (PACK_HEADER + merged.body.len()) as u64;
        merged
            .body
            .extend_from_slice(&bytes[PACK_HEADER..bytes.len() - 20]);
        for entry in entries {
            ids.insert(entry.id);
            merged.entries.push(Entry {
                offset: base + entry.offset - PACK_HEADER as u64,
                ..entry
            });
        }
        taken.push(pack);
    }
    if taken.len() < 2 {
        return Ok(false);
    }
    let name = merged.finish(&folder)?;
    fault_point("merged");
    let stem = |p: &PathBuf| {
        p.file_stem()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let taken_names: HashSet<String> = taken.iter().map(stem).collect();
    let mut listed: Vec<String> = ours
        .into_iter()
        .filter(|n| !taken_names.contains(n) && *n != name)
        .collect();
    listed.sort();
    listed.push(name.clone());
    rewrite_ledger(repo, &listed)?;
    fault_point("ledger");
    for pack in &taken {
        // Never the one just written, should it hold exactly what one of them held.
        if pack.file_stem().and_then(|n| n.to_str()) == Some(name.as_str()) {
            continue;
        }
        // The index first, as git does: a pack without one is never read.
        let _ = std::fs::remove_file(pack.with_extension("idx"));
        let _ = std::fs::remove_file(pack.with_extension("rev"));
        let _ = std::fs::remove_file(pack);
        fault_point("removed");
    }
    sync_dir(&folder)?;
    Ok(true)
}

/// The packs in `folder` that writ may merge (see [`merge_small_packs`]).
fn small_packs(folder: &Path) -> io::Result<Vec<PathBuf>> {
    let mut names = HashSet::new();
    let mut packs = Vec::new();
    for entry in std::fs::read_dir(folder)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "multi-pack-index" {
            return Ok(Vec::new());
        }
        if name.starts_with("pack-") && name.ends_with(".pack") {
            packs.push(entry);
        }
        names.insert(name);
    }
    let mut small = Vec::new();
    for entry in packs {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stem = name.trim_end_matches(".pack");
        let beside = |ext: &str| names.contains(&format!("{stem}.{ext}"));
        if !beside("idx")
            || ["keep", "promisor", "mtimes", "bitmap"]
                .iter()
                .any(|ext| beside(ext))
        {
            continue;
        }
        if entry.metadata()?.len() < SMALL_PACK_BYTES {
            small.push(entry.path());
        }
    }
    Ok(small)
}

/// A pack's entries, from its index (version 2, SHA-1, no offsets past 2 GiB), and its bytes.
fn read_pack(pack: &Path) -> io::Result<(Vec<Entry>, Vec<u8>)> {
    const HEADER: usize = 8;
    const FANOUT: usize = 256 * 4;
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "not a pack writ can merge");
    let index = std::fs::read(pack.with_extension("idx"))?;
    let bytes = std::fs::read(pack)?;
    if index.get(..HEADER) != Some(&[0xff, b't', b'O', b'c', 0, 0, 0, 2][..])
        || bytes.get(..8) != Some(&b"PACK\0\0\0\x02"[..])
        || bytes.len() < PACK_HEADER + 20
    {
        return Err(invalid());
    }
    let be32 = |at: usize| {
        index
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
            .ok_or_else(invalid)
    };
    let count = be32(HEADER + FANOUT - 4)? as usize;
    let ids_at = HEADER + FANOUT;
    let crcs_at = ids_at + count * 20;
    let offsets_at = crcs_at + count * 4;
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let id = index
            .get(ids_at + i * 20..ids_at + (i + 1) * 20)
            .and_then(|id| Oid::from_bytes(id).ok())
            .ok_or_else(invalid)?;
        let offset = be32(offsets_at + i * 4)?;
        if offset & 0x8000_0000 != 0 || offset as usize >= bytes.len() - 20 {
            return Err(invalid());
        }
        entries.push(Entry {
            id,
            crc: be32(crcs_at + i * 4)?,
            offset: u64::from(offset),
        });
    }
    Ok((entries, bytes))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_temp_file_left_by_a_crashed_writer_of_the_same_pid_does_not_stop_the_pack() {
        let dir = tempfile::tempdir().unwrap();
        let name = "pack-0123456789abcdef0123456789abcdef01234567.pack";
        std::fs::write(
            dir.path()
                .join(format!("tmp_{name}_{}", std::process::id())),
            b"torn",
        )
        .unwrap();
        put(dir.path(), name, b"PACK whole").unwrap();
        assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), b"PACK whole");
    }

    use crate::testing::git;

    /// One commit of `n.py` through writ's commit path (a pack of its own, and past
    /// [`MERGE_AT`] packs, the merge).
    fn commit(d: &Path, n: usize) {
        let paths = vec![format!("n{n}.py")];
        std::fs::write(d.join(&paths[0]), format!("n = {n}\n")).unwrap();
        let spec = crate::commit::CommitSpec {
            paths: &paths,
            message: "one more\n",
            author_name: "k",
            author_email: "k@writ",
            committer_name: "writ",
            committer_email: "writ@localhost",
        };
        crate::commit::commit_paths(d, &spec).unwrap().unwrap();
    }

    /// Kills the process at `step` when the test below asks for it.
    pub(super) fn abort_if_asked(step: &str) {
        if std::env::var("GIT_PACKS_TEST_ABORT_AT").as_deref() == Ok(step) {
            std::process::abort();
        }
    }

    const KILLED: &str = "packs::tests::killed_at_every_step_of_a_pack_merge_no_commit_is_lost";

    /// Run in a process of its own by the test below: one more commit, whose pack merge is
    /// killed at the step `GIT_PACKS_TEST_ABORT_AT` names.
    #[test]
    fn killed_at_every_step_of_a_pack_merge_no_commit_is_lost() {
        if let Ok(repo) = std::env::var("GIT_PACKS_TEST_REPO") {
            commit(Path::new(&repo), MERGE_AT);
            return;
        }
        for step in ["merged", "ledger", "removed"] {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            git(d, &["init", "-q", "-b", "main"]);
            std::fs::write(d.join("README"), "hello\n").unwrap();
            git(d, &["add", "README"]);
            git(
                d,
                &[
                    "-c",
                    "user.name=U",
                    "-c",
                    "user.email=u@x",
                    "commit",
                    "-q",
                    "-m",
                    "first",
                ],
            );
            // A user's own small pack, which no merge may take.
            git(d, &["repack", "-q", "-d"]);
            let users: Vec<_> = std::fs::read_dir(d.join(".git/objects/pack"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            for n in 0..MERGE_AT {
                commit(d, n);
            }
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([KILLED, "--exact", "--nocapture", "--test-threads=1"])
                .env("GIT_PACKS_TEST_REPO", d)
                .env("GIT_PACKS_TEST_ABORT_AT", step)
                .output()
                .unwrap();
            assert!(
                !child.status.success(),
                "{step}: the child was to be killed mid-merge: {}",
                String::from_utf8_lossy(&child.stderr)
            );
            // Every commit is there, every file readable, and git finds nothing wrong.
            let check = |commits: usize| {
                assert_eq!(
                    git(d, &["rev-list", "--count", "HEAD"]).trim(),
                    commits.to_string(),
                    "{step}"
                );
                git(d, &["fsck", "--strict", "--no-dangling"]);
                for n in 0..commits - 1 {
                    assert_eq!(
                        git(d, &["show", &format!("HEAD:n{n}.py")]),
                        format!("n = {n}\n"),
                        "{step}"
                    );
                }
                for name in &users {
                    assert!(
                        d.join(".git/objects/pack").join(name).exists(),
                        "{step}: {name}"
                    );
                }
            };
            check(MERGE_AT + 2);
            // The next commit's merge goes on from whatever the crash left.
            commit(d, MERGE_AT + 1);
            check(MERGE_AT + 3);
            git(d, &["gc", "-q"]);
            git(d, &["fsck", "--strict", "--no-dangling"]);
        }
    }
}
