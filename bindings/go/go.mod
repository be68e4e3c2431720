module vlc-compress.dev/vlccompress

go 1.19
