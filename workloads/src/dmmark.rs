//! Marks in a device-mapper `log-writes` target's log (`RunSettings::dm_mark`): after the
//! schema (`sqlwa-setup`) and after every commit returned (`sqlwa-txn-<index>`), the
//! engine sends the target the message `mark <text>` — what `dmsetup message <dev> 0 mark
//! <text>` does, through the same ioctl (DM_TARGET_MSG on /dev/mapper/control, see
//! `linux/dm-ioctl.h`). The target puts a mark in its log behind every write and flush
//! that had completed, so a crash state replayed from the log knows which commits SQLite
//! had acknowledged before it (`sqlwa.durability`).

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::EngineError;

const CONTROL: &str = "/dev/mapper/control";
/// `struct dm_ioctl` (linux/dm-ioctl.h): 312 bytes, the message follows it.
const DM_IOCTL_SIZE: usize = 312;
const NAME_OFFSET: usize = 48;
const NAME_LEN: usize = 128;
/// DM_VERSION_MAJOR; minor and patch 0 ask for nothing newer than any 4.x kernel has.
const DM_VERSION: [u32; 3] = [4, 0, 0];
/// _IOWR(DM_IOCTL = 0xfd, DM_TARGET_MSG_CMD = 14, struct dm_ioctl)
const DM_TARGET_MSG: u64 = (3 << 30) | ((DM_IOCTL_SIZE as u64) << 16) | (0xfd << 8) | 14;

/// An open line to one device-mapper target, to mark its log.
pub(crate) struct DmMarker {
    control: File,
    name: String,
}

impl DmMarker {
    pub fn open(name: &str) -> Result<DmMarker, EngineError> {
        if name.is_empty() || name.len() >= NAME_LEN || name.contains('/') {
            return Err(bad(name, "not a device-mapper device name"));
        }
        let control = File::options()
            .read(true)
            .write(true)
            .open(CONTROL)
            .map_err(|e| EngineError::io(CONTROL, format!("cannot open: {e}")))?;
        Ok(DmMarker {
            control,
            name: name.to_string(),
        })
    }

    pub fn mark(&self, text: &str) -> Result<(), EngineError> {
        let mut buffer = request(&self.name, &format!("mark {text}"));
        // SAFETY: the buffer is a complete dm_ioctl of its own data_size, which the kernel
        // reads and may write back within that size.
        let rc = unsafe {
            libc::ioctl(
                self.control.as_raw_fd(),
                DM_TARGET_MSG as _,
                buffer.as_mut_ptr(),
            )
        };
        if rc != 0 {
            let error = std::io::Error::last_os_error();
            return Err(bad(&self.name, &format!("cannot mark its log: {error}")));
        }
        Ok(())
    }
}

/// A DM_TARGET_MSG request: `struct dm_ioctl`, then `struct dm_target_msg` (sector 0,
/// the message NUL-terminated) at data_start, aligned to 8 bytes as dm_ioctl's size is.
fn request(name: &str, message: &str) -> Vec<u8> {
    let size = DM_IOCTL_SIZE + 8 + message.len() + 1;
    let mut buffer = vec![0u8; size.next_multiple_of(8)];
    let length = buffer.len() as u32;
    for (i, v) in DM_VERSION.iter().enumerate() {
        buffer[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    buffer[12..16].copy_from_slice(&length.to_ne_bytes()); // data_size
    buffer[16..20].copy_from_slice(&(DM_IOCTL_SIZE as u32).to_ne_bytes()); // data_start
    buffer[NAME_OFFSET..NAME_OFFSET + name.len()].copy_from_slice(name.as_bytes());
    let text = DM_IOCTL_SIZE + 8; // after the message's sector (0)
    buffer[text..text + message.len()].copy_from_slice(message.as_bytes());
    buffer
}

fn bad(name: &str, message: &str) -> EngineError {
    EngineError::BadSetting {
        name: "dm_mark".into(),
        message: format!("{name}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lays_out_dm_ioctl_and_message() {
        let buffer = request("lab", "mark sqlwa-txn-3");
        assert_eq!(buffer.len() % 8, 0);
        assert_eq!(u32::from_ne_bytes(buffer[0..4].try_into().unwrap()), 4);
        let data_size = u32::from_ne_bytes(buffer[12..16].try_into().unwrap());
        assert_eq!(data_size as usize, buffer.len());
        assert_eq!(&buffer[48..51], b"lab");
        assert_eq!(buffer[51], 0);
        assert_eq!(&buffer[320..336], b"mark sqlwa-txn-3");
        assert_eq!(buffer[336], 0);
    }

    #[test]
    fn refuses_names_that_are_no_dm_names() {
        assert!(matches!(
            DmMarker::open("a/b"),
            Err(EngineError::BadSetting { .. })
        ));
        assert!(matches!(
            DmMarker::open(""),
            Err(EngineError::BadSetting { .. })
        ));
    }
}
