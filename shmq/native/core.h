#pragma once
#include <stdint.h>
#include <stddef.h>
uint32_t shmq_crc32(uint32_t crc, const uint8_t *buf, size_t len);
