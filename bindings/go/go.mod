module vlccompress

go 1.19
