module consumer

go 1.19

require vlc-compress.dev/vlccompress v0.1.0
