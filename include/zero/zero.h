// The public header of the ZeRO engine for LibTorch: #include <zero/zero.h>, link zero::zero.
// Each line brings in one area's public API.
#pragma once

#include <zero/error.h>
#include <zero/config/config.h>
