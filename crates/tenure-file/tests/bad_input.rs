//! Paths that cannot be a log, and files that are not ours: each gets a typed error, and a file
//! that is not ours is never modified.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tenure_file::{FileError, FileEventStorage};
use tenure_ports::EventStorageError;

fn open_err(path: &Path) -> FileError {
    match FileEventStorage::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(err) => err,
    }
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = open_err(dir.path());
    assert!(matches!(err, FileError::IsDirectory { .. }), "{err:?}");
    assert!(err.to_string().contains("is a directory"), "{err}");
    let spi: EventStorageError = err.into();
    assert!(matches!(spi, EventStorageError::Io { .. }), "{spi:?}");
    assert!(matches!(
        FileError::find(&spi),
        Some(FileError::IsDirectory { .. })
    ));
}

#[test]
fn a_device_is_refused() {
    let err = open_err(Path::new("/dev/null"));
    assert!(matches!(err, FileError::NotRegularFile { .. }), "{err:?}");
}

#[test]
fn a_missing_directory_is_an_io_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("events.log");
    let err = open_err(&path);
    match &err {
        FileError::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("no-such-dir"), "{err}");
}

#[test]
fn a_path_that_cannot_be_written_is_refused() {
    // As an ordinary user, a read-only directory and a read-only file. Root ignores file
    // permissions, so there the test uses sysfs, where nobody can create a file.
    let dir = tempfile::tempdir().unwrap();
    let ro_dir = dir.path().join("read-only");
    fs::create_dir(&ro_dir).unwrap();
    fs::set_permissions(&ro_dir, fs::Permissions::from_mode(0o555)).unwrap();
    let ro_file = dir.path().join("read-only.log");
    fs::write(&ro_file, b"").unwrap();
    fs::set_permissions(&ro_file, fs::Permissions::from_mode(0o444)).unwrap();
    let privileged = fs::OpenOptions::new().append(true).open(&ro_file).is_ok();
    let mut checked = 0;
    if !privileged {
        for path in [ro_dir.join("events.log"), ro_file.clone()] {
            let err = open_err(&path);
            assert!(matches!(err, FileError::NotWritable { .. }), "{err:?}");
            assert!(err.to_string().contains("is not writable"), "{err}");
            checked += 1;
        }
    }
    let sysfs = Path::new("/sys/tenure-file-test.log");
    if Path::new("/sys/kernel").is_dir() {
        let err = open_err(sysfs);
        assert!(matches!(err, FileError::NotWritable { .. }), "{err:?}");
        checked += 1;
    }
    fs::set_permissions(&ro_dir, fs::Permissions::from_mode(0o755)).unwrap();
    if checked == 0 {
        println!("skipped: a_path_that_cannot_be_written_is_refused: privileged and no sysfs");
    }
}

#[test]
fn a_file_that_is_not_ours_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [
        ("json.log", &b"{\"event\": 1}\n{\"event\": 2}\n"[..]),
        ("short.log", &b"PK\x03"[..]),
        ("binary.log", &[0u8; 64][..]),
        ("text.log", &b"TENURE is not the magic"[..]),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, content).unwrap();
        let err = open_err(&path);
        assert!(matches!(err, FileError::NotOurs { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains("not a Tenure log"), "{err}");
        let spi: EventStorageError = err.into();
        assert!(matches!(spi, EventStorageError::Corrupt { .. }), "{spi:?}");
        assert_eq!(fs::read(&path).unwrap(), content, "{name} was modified");
    }
}

fn header(version: u32) -> Vec<u8> {
    let mut header = b"TENURLOG".to_vec();
    header.extend_from_slice(&version.to_le_bytes());
    let crc = crc32(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    header
}

/// CRC-32 (IEEE), bit by bit: an independent check of the format's header.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn the_header_is_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.log");
    drop(FileEventStorage::open(&path).unwrap());
    assert_eq!(fs::read(&path).unwrap(), header(1));
}

#[test]
fn another_format_version_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.log");
    let content = [header(2), b"whatever version 2 writes".to_vec()].concat();
    fs::write(&path, &content).unwrap();
    let err = open_err(&path);
    assert!(
        matches!(
            err,
            FileError::UnsupportedVersion {
                version: 2,
                supported: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(fs::read(&path).unwrap(), content);
}

#[test]
fn a_damaged_header_is_corruption_at_offset_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.log");
    let mut content = header(1);
    content[10] ^= 0x40;
    fs::write(&path, &content).unwrap();
    let err = open_err(&path);
    assert_eq!(err.offset(), Some(0), "{err:?}");
    assert_eq!(fs::read(&path).unwrap(), content);
}

#[test]
fn an_empty_file_or_an_unfinished_header_becomes_a_fresh_log() {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [("empty.log", &b""[..]), ("unfinished.log", &header(1)[..7])] {
        let path = dir.path().join(name);
        fs::write(&path, content).unwrap();
        let storage = FileEventStorage::open(&path).unwrap();
        assert!(storage.recovery().created, "{name}");
        drop(storage);
        assert_eq!(fs::read(&path).unwrap(), header(1), "{name}");
    }
}

#[test]
fn a_second_open_in_the_same_process_is_in_use_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.log");
    let first = FileEventStorage::open(&path).unwrap();
    let err = open_err(&path);
    assert!(matches!(err, FileError::InUse { .. }), "{err:?}");
    assert!(err.to_string().contains("in use"), "{err}");
    // Through another path to the same file, too.
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(matches!(open_err(&link), FileError::InUse { .. }));
    let clone = first.clone();
    drop(first);
    assert!(
        matches!(open_err(&path), FileError::InUse { .. }),
        "a clone keeps the file"
    );
    drop(clone);
    FileEventStorage::open(&path).unwrap();
}
